"""The training loop and what it keeps: components, the budget ledger, gradient statistics, run
directories and checkpoints, the probe set and the provenance of trained samples."""
