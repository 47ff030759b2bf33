"""The analysis notebooks, their generator and runner; their plot helpers are `replaylab.results.plots`."""
