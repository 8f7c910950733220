"""gpumeter: GPU metering, chargeback and utilization analytics for shared Kubernetes GPU pools.

The package is laid out by lifecycle; each layer imports only from the layers below it:

    config, storage        settings, and the warehouse every layer stands on
    ingest                 raw samples from a source (Parquet, Prometheus) and Kubernetes objects
    models                 the SQL models (staging -> intermediate -> marts) and their runner
    billing                invoice lines, periods, adjustments, exports, budgets
    views                  what people read: scoped queries, summaries, advice
    pipelines, dashboard, cli    the shells: Dagster, Streamlit, the command line

docs/architecture.md draws the flow from a scrape to an invoice line.
"""

__version__ = "0.2.0"
