"""`rerank data list|show`: what the registry knows and what is on disk."""

from __future__ import annotations

import json

import click

from ..data import dataset_names, get_dataset
from . import cli


@cli.group()
def data() -> None:
    """Named data sets and their parts."""


@data.command("list")
def list_datasets() -> None:
    """List the named data sets and whether their files are present."""
    for name in dataset_names():
        ds = get_dataset(name)
        state = "present" if ds.present else "not present"
        click.echo(f"{name:<14} {state:<12} {ds.description}")


@data.command("show")
@click.argument("name")
def show(name: str) -> None:
    """Describe one data set: files, candidate runs and counts (as JSON)."""
    ds = get_dataset(name)
    summary = ds.summary()
    if ds.present:
        qrels = ds.qrels()
        summary["counts"] = {"documents": sum(1 for _ in ds.documents()), "topics": len(ds.topics()),
                             "judged_queries": len(qrels), "judgements": sum(len(v) for v in qrels.values())}
    else:
        summary["missing"] = [str(p) for p in ds.missing()]
    click.echo(json.dumps(summary, indent=2))
