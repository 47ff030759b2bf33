"""Samples in checkpoints (types.Sample.__getstate__/__setstate__): a replay buffer's samples come back
equal through the real save and load (storage.atomic_torch_save, storage.safe_torch_load), small tensors
travel inline instead of as one archive record each, and checkpoints written before that still load."""

from __future__ import annotations

import zipfile

import pytest
import torch

from replaylab.storage import atomic_torch_save, safe_torch_load
from replaylab.types import INLINE_BYTES, OffPolicy, Prompt, Sample


def _sample(i: int, **kw) -> Sample:
    prompt = Prompt(f"p{i % 3}", "text", (2, 5, 7 + i % 3), "12")
    n = i % 5  # includes an empty response
    base = dict(prompt=prompt, response_ids=torch.arange(n, dtype=torch.long) + i,
                behaviour_logprobs=-torch.rand(n), policy_version=i, source="fresh", truncated=bool(i % 2),
                sample_id=f"s{i}")
    return Sample(**{**base, **kw})


def _assert_same(a: Sample, b: Sample) -> None:
    for name, v in a.__dict__.items():
        w = b.__dict__[name]
        if isinstance(v, torch.Tensor):
            assert isinstance(w, torch.Tensor) and w.dtype == v.dtype and torch.equal(w, v), name
        else:
            assert w == v, name


def test_samples_round_trip_through_a_checkpoint(tmp_path):
    big = torch.randn(64, 128)  # 32 KB: over INLINE_BYTES, stays a tensor
    assert big.numel() * 4 > INLINE_BYTES
    samples = [_sample(i) for i in range(12)]
    samples += [
        _sample(20, reward=1.0, advantage=-0.5, teacher_logprobs=-torch.rand(4), extras={"visits": 2},
                off_policy=OffPolicy(is_cap=2.0, loss_weight=0.5)),
        _sample(21, behaviour_logprobs=torch.zeros(1, dtype=torch.bfloat16), response_ids=torch.tensor([9])),
        _sample(22, teacher_full_logprobs=torch.randn(3, 128), proximal_logprobs=torch.zeros(3, dtype=torch.float64),
                response_ids=torch.tensor([1, 2, 3]), behaviour_logprobs=-torch.ones(3)),
        _sample(23, teacher_full_logprobs=big, response_ids=torch.arange(64), behaviour_logprobs=-torch.ones(64)),
    ]
    samples.append(samples[-1].replayed())  # shares the big tensor with the one before
    path = tmp_path / "ckpt.pt"
    atomic_torch_save({"buffer": samples}, path)
    back = safe_torch_load(path)["buffer"]
    assert len(back) == len(samples)
    for a, b in zip(samples, back):
        _assert_same(a, b)
    assert back[-1].teacher_full_logprobs.data_ptr() == back[-2].teacher_full_logprobs.data_ptr()
    back[0].response_ids.add_(0)  # restored tensors are writable, not views of read-only bytes


def test_small_tensors_are_not_archive_records(tmp_path):
    samples = [_sample(i) for i in range(500)]
    path = tmp_path / "ckpt.pt"
    atomic_torch_save(samples, path)
    records = [n for n in zipfile.ZipFile(path).namelist() if "/data/" in n]
    assert len(records) == 0  # was two per sample (response ids and behaviour log-probs)
    assert len(safe_torch_load(path)) == 500


def test_checkpoints_written_before_the_compact_form_still_load(tmp_path, monkeypatch):
    samples = [_sample(i, reward=float(i)) for i in range(6)]
    path = tmp_path / "old.pt"
    with monkeypatch.context() as m:  # the earlier pickling: every field, tensors as tensors
        m.setattr(Sample, "__getstate__", lambda self: dict(self.__dict__))
        atomic_torch_save(samples, path)
    assert any("/data/" in n for n in zipfile.ZipFile(path).namelist())
    for a, b in zip(samples, safe_torch_load(path)):
        _assert_same(a, b)


def test_a_stored_dtype_that_is_not_a_dtype_is_refused():
    s = Sample.__new__(Sample)
    state = dict(_sample(3).__getstate__())
    for name in ("manual_seed", "no_such_dtype"):
        state["response_ids"] = (name, (3,), b"\0" * 24)
        with pytest.raises(ValueError, match=name):
            s.__setstate__(state)
