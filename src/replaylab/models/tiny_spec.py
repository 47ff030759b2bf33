"""What the tiny world is built from; its hash names the cache directory.

Kept free of torch/transformers imports so that composing a config stays fast.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from replaylab.config_fields import check, knob
from replaylab.tasks.tiny8 import SFT_KINDS, held_out_questions

BUILD_FORMAT = 1  # bump when the build code changes what it produces


@dataclass
class TinyModelSize:
    """Qwen3 shape of a tiny model."""

    num_layers: int = knob(2, "transformer blocks")
    hidden_size: int = knob(128, "residual width")
    num_heads: int = knob(4, "attention heads")
    num_kv_heads: int = knob(2, "grouped-query key/value heads")
    intermediate_size: int = knob(384, "MLP width")


@dataclass
class TinyWorldConfig:
    """How the tiny world is built. Its hash names the cache directory."""

    seed: int = knob(0, "seeds model init and the SFT data stream")
    teacher: TinyModelSize = field(default_factory=TinyModelSize, metadata={"help": "teacher shape (the student is an early checkpoint of the same run)"})
    teacher_steps: int = knob(2000, "SFT steps of the teacher run")
    student_step: int = knob(800, "the student is the teacher run's checkpoint at this SFT step (tiny8 ~30%: room to learn, yet earns rewards)")
    batch_size: int = knob(64, "SFT batch size")
    lr: float = knob(1e-3, "SFT peak learning rate (AdamW, linear warm-up then cosine to 0)")
    warmup: int = knob(50, "SFT warm-up steps")
    kinds: list[str] = knob(list(SFT_KINDS), "problem kinds of the SFT stream (uniform)")

    def __post_init__(self) -> None:
        check(0 < self.student_step < self.teacher_steps, "tiny.student_step", f"must be in (0, teacher_steps={self.teacher_steps}), got {self.student_step}")

    def digest(self) -> str:
        # The SFT stream leaves out the tiny8 questions, so the held-out set is part of what is built:
        # enlarging it must not reuse a world trained on questions that are now test questions.
        held_out = hashlib.sha256("\n".join(sorted(held_out_questions(tuple(self.kinds)))).encode()).hexdigest()[:16]
        payload = json.dumps({"format": BUILD_FORMAT, "held_out": held_out, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]
