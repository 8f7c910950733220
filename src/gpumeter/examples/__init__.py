"""Example configuration shipped with the package (`gpumeter config example`)."""
