"""Analysis notebooks and their helpers; a package so tests and notebooks import `analysis.plots`."""
