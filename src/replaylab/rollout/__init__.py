"""Rollout engines behind one `Generator` protocol (see `base`)."""

from replaylab.rollout.base import Generator, SamplingParams

__all__ = ["Generator", "SamplingParams"]
