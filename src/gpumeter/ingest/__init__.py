"""Ingest: raw samples of a (cluster, day) from a source (Parquet files, any PromQL API) in the raw-samples
schema, with the Kubernetes DRA objects that say who held which device."""
