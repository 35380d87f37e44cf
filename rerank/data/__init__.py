"""Data sets: format readers and the registry of named collections."""

from .formats import Document, Qrels
from .registry import Dataset, dataset_names, files_dataset, get_dataset, searched_index, unknown_dataset

__all__ = ["Dataset", "Document", "Qrels", "dataset_names", "files_dataset", "get_dataset", "searched_index",
           "unknown_dataset"]
