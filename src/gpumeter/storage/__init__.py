"""Storage, below every other layer: the Parquet warehouse (local or object store), its file layout, atomic
writes, staged writes and the (cluster, day) locks."""
