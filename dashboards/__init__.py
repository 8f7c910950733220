"""The Streamlit finance and ops dashboard (its own issue): reads the warehouse marts, never the pipeline."""
