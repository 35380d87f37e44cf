"""`python -m rerank` is the `rerank` command."""

from .cli import main

main()
