"""Models: the SQL models of sql/ (staging -> intermediate -> marts), declared in each layer's schema.yml,
and the runner that meters one (cluster, day) through them in DuckDB."""
