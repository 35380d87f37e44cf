"""First stages: ways to get candidates (Lucene BM25 now; each back end its own module)."""
