"""`PromptBuffer` unit tests, plus the helpers the GRPO replay-strategy tests share (a stand-in
grader and the kill-and-resume check)."""

from __future__ import annotations

import io

import pytest
import torch

from conftest import comparable, load_rows
from replaylab.replay.buffer import PromptBuffer
from replaylab.types import Prompt, Sample

# ----------------------------------------------------------------------------- shared helpers
# Short GRPO runs on the micro world: 4 prompts x 4 samples, 6 updates, no evaluation; one torch
# thread (on a shared 2-core machine, two spinning OpenMP threads make a run ~10x slower).
GRPO = ["trainer=grpo", "teacher=none", "trainer.prompts_per_iteration=4", "trainer.samples_per_prompt=4",
        "budget.max_updates=6", "eval=none", "trainer.threads=1"]


def token_rewards(monkeypatch, modulus: int) -> None:
    """Grade with a deterministic stand-in: reward 1 iff the response's token-id sum is divisible by
    `modulus` (about 1/modulus of the samples). The micro world's student solves nothing within a
    few updates, so real grading would give all-zero groups and no strategy would have anything to do."""
    import replaylab.objectives.grpo as grpo_mod

    def grade(samples, tokenizer, grader):
        for s in samples:
            if s.reward is None:
                s.reward = float(int(s.response_ids.sum()) % modulus == 0)

    monkeypatch.setattr(grpo_mod, "grade_rewards", grade)


class SimulatedKill(Exception):
    pass


def assert_resume_reproduces(run_train, monkeypatch, tmp_path, overrides: list[str]) -> None:
    """An uninterrupted run and a run killed in iteration 5 (after its checkpoint at update 3) and
    started again write the same rows."""
    from replaylab.training.trainer import Trainer

    overrides = overrides + ["trainer.checkpoint_every=3"]
    _, full = run_train(overrides, tmp_path / "full")
    real = Trainer.run_iteration

    def dies_at_4(self):
        if self.iteration == 4:
            raise SimulatedKill
        return real(self)

    monkeypatch.setattr(Trainer, "run_iteration", dies_at_4)
    with pytest.raises(SimulatedKill):
        run_train(overrides, tmp_path / "killed")
    monkeypatch.setattr(Trainer, "run_iteration", real)
    [ckpt] = (tmp_path / "killed").glob("*/*/checkpoints/latest")
    assert ckpt.read_text() == "update_0000003.pt"  # the rerun resumes mid-run, with the strategy's state
    summary, killed = run_train(overrides, tmp_path / "killed")
    assert summary["updates"] == 6 and killed.name == full.name
    expected = comparable(load_rows(full))
    assert any(r["split"] == "strategy" and r["iteration"] > 3 for r in expected)
    assert comparable(load_rows(killed)) == expected


# ----------------------------------------------------------------------------- PromptBuffer
def sample(uid: str, i: int, n: int = 3) -> Sample:
    return Sample(Prompt(uid, uid, (1, 2), "0"), torch.arange(n) + i, torch.randn(n), policy_version=i,
                  source="fresh", truncated=False, sample_id=f"{uid}-{i}", reward=float(i % 2))


def ids(buf: PromptBuffer, uid: str) -> list[str]:
    return [s.sample_id for s in buf.items(uid)]


def test_per_prompt_fifo_evicts_the_oldest_of_that_prompt():
    buf = PromptBuffer(max_per_prompt=2)
    for i in range(3):
        buf.add("a", sample("a", i), step=i)
    buf.add("b", sample("b", 0), step=3)
    assert ids(buf, "a") == ["a-1", "a-2"] and ids(buf, "b") == ["b-0"]
    assert len(buf) == 3 and buf.num_prompts == 2 and "a" in buf and "c" not in buf
    assert [e.step for e in buf.get("a")] == [1, 2]


def test_global_bound_evicts_the_oldest_entry_of_the_whole_store():
    buf = PromptBuffer(max_total=3)
    buf.add("a", sample("a", 0), 0)
    buf.add("b", sample("b", 0), 0)
    buf.add("a", sample("a", 1), 1)
    buf.add("c", sample("c", 0), 1)  # evicts a-0 (oldest overall), not b-0
    assert [(u, e.item.sample_id) for u, e in buf.entries()] == [("b", "b-0"), ("a", "a-1"), ("c", "c-0")]
    buf.add("c", sample("c", 1), 2)  # evicts b-0; prompt b disappears
    assert buf.uids() == ["a", "c"] and len(buf) == 3


def test_remove_and_drop():
    buf = PromptBuffer()
    for i in range(4):
        buf.add("a" if i % 2 else "b", sample("x", i), step=i)
    entry = buf.get("a")[0]
    buf.remove("a", entry)
    assert [e.step for e in buf.get("a")] == [3]
    assert buf.drop(lambda uid, e: e.step < 3) == 2
    assert buf.uids() == ["a"] and len(buf) == 1
    with pytest.raises(ValueError):
        PromptBuffer(max_per_prompt=0)


def test_state_round_trips_through_torch_save_exactly():
    buf = PromptBuffer(max_per_prompt=3, max_total=5)
    for i in range(7):
        buf.add("ab"[i % 2], sample("ab"[i % 2], i), step=i)
    stream = io.BytesIO()
    torch.save({"buffer": buf.state_dict()}, stream)
    stream.seek(0)
    restored = PromptBuffer(max_per_prompt=3, max_total=5)
    restored.load_state_dict(torch.load(stream, weights_only=False)["buffer"])
    extra = sample("c", 9)
    for b in (buf, restored):  # both continue identically
        b.add("c", extra, step=9)
    assert restored.uids() == buf.uids() and len(restored) == len(buf)
    for (u1, e1), (u2, e2) in zip(buf.entries(), restored.entries(), strict=True):
        assert (u1, e1.step, e1.seq, e1.item.sample_id) == (u2, e2.step, e2.seq, e2.item.sample_id)
        assert torch.equal(e1.item.behaviour_logprobs, e2.item.behaviour_logprobs)
        assert torch.equal(e1.item.response_ids, e2.item.response_ids)
