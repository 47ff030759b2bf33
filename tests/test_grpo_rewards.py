"""`grade_rewards`, the GRPO reward path, through the real math grader and the tiny tokenizer. Every other
GRPO test that depends on rewards replaces it with a stand-in (the micro world's student solves nothing), so
this is where inverted rewards, grading the wrong field or grading a continuation without its prefix fail."""

from __future__ import annotations

import torch

from replaylab.grading import Grader
from replaylab.models.tiny_tokenizer import build_tiny_tokenizer
from replaylab.objectives.grpo import grade_rewards
from replaylab.types import Prefix, Prompt, Sample


def test_rewards_grade_the_whole_answer_against_the_prompts_gold():
    tok = build_tiny_tokenizer()
    prompt = Prompt("q", "12+30=?", (1,), "42")
    encode = lambda text: torch.tensor(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731

    def sample(text: str, prefix: str | None = None, reward: float | None = None) -> Sample:
        ids = encode(text)
        s = Sample(prompt, ids, torch.zeros(len(ids)), 0, "fresh", False, f"s-{text}-{prefix}", reward=reward)
        if prefix is not None:  # a continuation of a stored prefix: only the suffix is the sample's response
            s.prefix = Prefix(encode(prefix), "teacher", None, "origin")
        return s

    samples = [
        sample("12+30=42. \\boxed{42}"),                 # right
        sample("12+30=41. \\boxed{41}"),                 # wrong
        sample("2}", prefix="12+30=42. \\boxed{4"),      # right only with its prefix: "2}" alone holds no answer
        sample("1}", prefix="12+30=41. \\boxed{4"),      # wrong with its prefix
        sample("\\boxed{42}", reward=0.0),               # a reward already set (a replayed sample) is kept
    ]
    with Grader(num_workers=1) as grader:
        grade_rewards(samples, tok, grader)
    assert [s.reward for s in samples] == [1.0, 0.0, 1.0, 0.0, 0.0]


def test_a_response_the_budget_cut_is_not_credited_for_an_anchored_guess_in_its_reasoning():
    """Without a box, an ended response is graded by an anchored answer in its tail; a truncated one is not (its
    "the final answer is 42? wait" was not the model's answer), though a complete box in it still counts."""
    tok = build_tiny_tokenizer()
    prompt = Prompt("q", "12+30=?", (1,), "42")

    def sample(text: str, truncated: bool) -> Sample:
        ids = torch.tensor(tok(text, add_special_tokens=False)["input_ids"])
        return Sample(prompt, ids, torch.zeros(len(ids)), 0, "fresh", truncated, f"s-{text}-{truncated}")

    guess = "12+30 is 42? The final answer is 42. Wait, let me add 12 and 30 again, carrying the"
    samples = [sample("The final answer is 42", False), sample(guess, True), sample("So \\boxed{42}. Check: 12+3", True),
               sample(guess, False)]
    with Grader(num_workers=1) as grader:
        grade_rewards(samples, tok, grader)
        statuses = [r.status for r in grader.grade([(guess, "42")] * 2, truncated=[True, False])]
    assert [s.reward for s in samples] == [1.0, 0.0, 1.0, 1.0]
    assert statuses == ["no_answer", "ok"]


def test_rewards_without_a_verdict_are_counted_in_the_train_rows(run_train, monkeypatch):
    """A grading timeout or error, or a gold the grader cannot parse, scores 0 like a wrong answer: a GRPO run on
    a training set whose golds all failed to parse ran to its end reading like a model that solves nothing
    (reward 0, every group zero-variance). Train rows now carry the share of such rewards (bad-input audit, F4)."""
    from conftest import load_rows
    from replaylab.grading.result import GradeResult

    grpo = ["trainer=grpo", "teacher=none", "eval=none", "eval.probe_size=0", "trainer.samples_per_prompt=2"]
    _, healthy = run_train(grpo)
    monkeypatch.setattr(Grader, "grade", lambda self, pairs, truncated=None: [GradeResult(False, "unparseable_gold")
                                                                               for _ in pairs])
    _, broken = run_train([*grpo, "trainer.seed=1"])

    def ungraded(run):
        return [r["value"] for r in load_rows(run) if r["split"] == "train" and r["metric"] == "ungraded_rewards"]

    assert ungraded(healthy) and set(ungraded(healthy)) == {0.0}
    assert ungraded(broken) and set(ungraded(broken)) == {1.0}
