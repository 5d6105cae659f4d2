"""anedvd's Python package. ``import anedvd.forge as af`` for the graph API."""
