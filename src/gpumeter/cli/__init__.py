"""The `gpumeter` command line: a thin shell over the pipelines and views."""
