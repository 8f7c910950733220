"""The Streamlit finance and ops dashboard: reads the warehouse through gpumeter.views, never the pipeline."""

from pathlib import Path

# The Streamlit script: `gpumeter dashboard` runs `streamlit run` on it.
APP = Path(__file__).parent / "app.py"
