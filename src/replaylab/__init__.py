"""replaylab: a benchmark harness for replay strategies in LLM post-training."""

__version__ = "0.1.0"
