"""rerank: neural re-ranking and evaluation over TREC run streams."""

__version__ = "0.1.0"
