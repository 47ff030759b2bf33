"""Command-line entry points: `replaylab` (main), `python -m replaylab.train|evaluate|plan`."""
