"""First stages: ways to get candidates (`api.py`: Lucene, Elasticsearch and dense back ends, each its own module, and
a data set's shipped candidate runs; `fusion.py`: fusing runs)."""
