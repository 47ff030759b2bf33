"""The evaluation runner end to end on a tiny random-init Qwen3 model and its tokenizer: prompt
rendering, k per benchmark, greedy k=1, grading applied (a scripted generator that answers half the
problems right scores exactly 0.5), skipped unparseable golds, counted timeouts, and the real
HFGenerator + Grader path."""

from __future__ import annotations

import math

from dataclasses import dataclass

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from replaylab.evaluation.benchmarks import Benchmark, BenchmarkItem, get_benchmarks
from replaylab.evaluation.runner import evaluate_benchmarks, problem_subset, render_question
from replaylab.evaluation.summary import METRICS
from replaylab.models.tiny_tokenizer import build_tiny_tokenizer
from replaylab.rollout.base import SamplingParams
from replaylab.rollout.hf import HFGenerator
from replaylab.types import Prompt, Sample


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    return Qwen3ForCausalLM(cfg).eval()


@dataclass
class Verdict:
    correct: bool
    status: str


def boxed_match(pairs):
    """A stand-in grader: exact match of the last \\boxed{...} against the gold."""
    out = []
    for response, gold in pairs:
        start = response.rfind("\\boxed{")
        if start < 0:
            out.append(Verdict(False, "no_answer"))
            continue
        pred = response[start + len("\\boxed{") :].split("}")[0]
        out.append(Verdict(pred.strip() == gold.strip(), "ok"))
    return out


class ScriptedGenerator:
    """Answers `\\boxed{gold}` for the uids in `right`, `\\boxed{wrong}` otherwise; records its calls."""

    policy_version = 0

    def __init__(self, tok, right: set[str], truncate: set[str] = frozenset()):
        self.tok, self.right, self.truncate, self.calls = tok, right, truncate, []

    def generate(self, prompts: list[Prompt], params: SamplingParams, seed: int, source="fresh"):
        self.calls.append((list(prompts), params, seed))
        groups = []
        for p in prompts:
            text = f"So \\boxed{{{p.answer if p.uid in self.right else 'wrong'}}}"
            ids = self.tok(text, add_special_tokens=False)["input_ids"]
            cut = p.uid in self.truncate
            ids = ids if cut else ids + [self.tok.eos_token_id]  # the EOS is skipped when decoding
            resp = torch.tensor(ids, dtype=torch.long)
            groups.append([
                Sample(p, resp, torch.zeros(len(ids)), 0, source, cut, f"{p.uid}-{j}") for j in range(params.n)
            ])
        return groups

    def sync_weights(self, model, version):
        pass


def _rows(rows, benchmark):
    return {r["metric"]: r for r in rows if r["benchmark"] == benchmark}


def test_half_right_scores_exactly_half(tok):
    benches = get_benchmarks(["tiny8/add2", "tiny8/mul"])
    chosen = [problem_subset(b, 10) for b in benches]  # the 10 problems max_problems=10 evaluates
    right = {it.id for items in chosen for it in items[::2]}  # 5 of the 10 of each set
    truncated = {chosen[0][1].id}
    gen = ScriptedGenerator(tok, right, truncated)
    params = SamplingParams(max_new_tokens=32, temperature=1.0)
    records, rows = evaluate_benchmarks(
        gen, tok, benches, params, boxed_match,
        instruction="", enable_thinking=False, seed=5, samples_per_problem=3, max_problems=10, suite="tiny8",
    )
    assert len(records) == 2 * 10 * 3
    assert set(records[0]) >= {"benchmark", "id", "sample", "response", "correct", "status", "num_tokens", "truncated"}
    assert [r["sample"] for r in records[:3]] == [0, 1, 2]
    assert records[0]["response"] == f"So \\boxed{{{chosen[0][0].answer}}}"  # EOS skipped
    assert sum(r["correct"] for r in records) == 30

    assert len(rows) == 3 * len(METRICS)
    assert {tuple(sorted(r)) for r in rows} == {("benchmark", "k", "metric", "n_problems", "n_samples", "value")}
    for name in ("tiny8/add2", "tiny8/mul"):
        m = _rows(rows, name)
        assert list(m) == list(METRICS)
        assert m["avg@k"]["value"] == 0.5 and m["pass@1"]["value"] == 0.5 and m["pass@k"]["value"] == 0.5
        assert m["ci_low"]["value"] < 0.5 < m["ci_high"]["value"]
        assert (m["avg@k"]["n_problems"], m["avg@k"]["n_samples"], m["avg@k"]["k"]) == (10, 30, 3)
        assert m["timeouts"]["value"] == m["unparseable_gold"]["value"] == 0
    assert _rows(rows, "tiny8/add2")["truncation_rate"]["value"] == pytest.approx(0.1)
    assert _rows(rows, "tiny8/mul")["truncation_rate"]["value"] == 0
    mean = _rows(rows, "tiny8/mean")
    assert mean["avg@k"]["value"] == 0.5 and mean["truncation_rate"]["value"] == pytest.approx(0.05)
    assert (mean["avg@k"]["n_problems"], mean["avg@k"]["n_samples"]) == (20, 60)
    assert mean["ci_low"]["value"] < 0.5 < mean["ci_high"]["value"]
    # each cell's standard error over problems, by hand from the records; the suite mean's combines them
    ses = []
    for name in ("tiny8/add2", "tiny8/mul"):
        per_problem: dict[str, list[bool]] = {}
        for r in records:
            if r["benchmark"] == name:
                per_problem.setdefault(r["id"], []).append(bool(r["correct"]))
        acc = [sum(c) / len(c) for c in per_problem.values()]
        mu = sum(acc) / len(acc)
        ses.append(math.sqrt(sum((a - mu) ** 2 for a in acc) / (len(acc) - 1) / len(acc)))
        assert _rows(rows, name)["se"]["value"] == pytest.approx(ses[-1])
    assert mean["se"]["value"] == pytest.approx(math.sqrt(ses[0] ** 2 + ses[1] ** 2) / 2)

    # one generate call for both (same k), n=k, the caller's seed, prompts through the chat template
    assert len(gen.calls) == 1
    prompts, sent, seed = gen.calls[0]
    assert (sent.n, sent.temperature, sent.max_new_tokens, seed) == (3, 1.0, 32, 5)
    first = chosen[0][0]
    assert prompts[0].uid == first.id and prompts[0].answer == first.answer
    assert prompts[0].text == f"<|im_start|>user\n{first.question}<|im_end|>\n<|im_start|>assistant\n"
    assert list(prompts[0].token_ids) == tok(prompts[0].text, add_special_tokens=False)["input_ids"]


def _fake_bench(name: str, k: int, n: int, golds=None) -> Benchmark:
    golds = golds or [str(i) for i in range(n)]
    items = tuple(BenchmarkItem(f"{name}-{i}", f"{i}+0=?", g) for i, g in enumerate(golds))
    return Benchmark(name, items, k=k, kind="math")


def test_k_per_benchmark_and_greedy(tok):
    benches = [_fake_bench("a", 4, 3), _fake_bench("b", 2, 3), _fake_bench("c", 4, 2)]
    gen = ScriptedGenerator(tok, right=set())
    params = SamplingParams(max_new_tokens=8, temperature=0.6, top_p=0.95, top_k=20)
    records, rows = evaluate_benchmarks(gen, tok, benches, params, boxed_match,
                                        instruction="Box it.", enable_thinking=True, seed=0)
    assert sorted((c[1].n, len(c[0])) for c in gen.calls) == [(2, 3), (4, 5)]
    assert all(c[1].top_k == 20 and c[1].top_p == 0.95 for c in gen.calls)
    assert len(records) == 3 * 4 + 3 * 2 + 2 * 4
    assert {r["benchmark"]: r["k"] for r in rows if r["metric"] == "avg@k"} == {"a": 4, "b": 2, "c": 4, "mean": None}
    assert gen.calls[0][0][0].text.rstrip().endswith("Box it.<|im_end|>\n<|im_start|>assistant")

    gen = ScriptedGenerator(tok, right=set())
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    records, _ = evaluate_benchmarks(gen, tok, benches, greedy, boxed_match, instruction="", enable_thinking=False,
                                     seed=0, samples_per_problem=8, max_problems=1)
    assert [(c[1].n, len(c[0])) for c in gen.calls] == [(1, 3)]
    assert len(records) == 3


def test_enable_thinking_reaches_the_chat_template():
    tok = build_tiny_tokenizer()
    tok.chat_template += "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}"
    assert render_question(tok, "1+1=?", "", enable_thinking=False).endswith("<think></think>")
    assert "<think>" not in render_question(tok, "1+1=?", "", enable_thinking=True)


def test_unparseable_gold_is_skipped_and_timeouts_count_as_wrong(tok):
    bench = _fake_bench("x", 2, 4, golds=["0", "BAD", "2", "3"])
    gen = ScriptedGenerator(tok, right={"x-0", "x-2"})

    def grade(pairs):
        out = boxed_match(pairs)
        for i, (response, gold) in enumerate(pairs):
            if gold == "BAD":
                out[i] = Verdict(False, "unparseable_gold")
            elif gold == "2" and i % 2:
                out[i] = Verdict(False, "timeout")
        return out

    params = SamplingParams(max_new_tokens=8)
    records, rows = evaluate_benchmarks(gen, tok, [bench], params, grade,
                                        instruction="", enable_thinking=False, seed=0)
    m = _rows(rows, "x")
    assert m["unparseable_gold"]["value"] == 1 and m["timeouts"]["value"] == 1
    assert (m["avg@k"]["n_problems"], m["avg@k"]["n_samples"]) == (3, 6)
    assert m["avg@k"]["value"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["pass@k"]["value"] == pytest.approx(2 / 3)
    assert _rows(rows, "mean")["unparseable_gold"]["value"] == 1


def test_a_benchmark_that_graded_nothing_makes_the_suite_mean_nan_not_the_mean_of_the_rest(tok):
    """Every gold of one benchmark unparseable (a broken file): the suite mean was the other benchmark's alone,
    with exit 0 (bad-input audit, F4). Now NaN, with the counts still summed."""
    benches = [_fake_bench("good", 1, 2, golds=["0", "1"]), _fake_bench("broken", 1, 2, golds=["BAD", "BAD"])]
    gen = ScriptedGenerator(tok, right={"good-0", "good-1"})

    def grade(pairs):
        return [Verdict(False, "unparseable_gold") if gold == "BAD" else v for v, (_, gold) in zip(boxed_match(pairs), pairs)]

    _, rows = evaluate_benchmarks(gen, tok, benches, SamplingParams(max_new_tokens=8), grade,
                                  instruction="", enable_thinking=False, seed=0)
    assert _rows(rows, "good")["avg@k"]["value"] == 1.0 and math.isnan(_rows(rows, "broken")["avg@k"]["value"])
    mean = _rows(rows, "mean")
    assert all(math.isnan(mean[m]["value"]) for m in ("avg@k", "pass@k", "ci_low", "ci_high", "se"))
    assert mean["unparseable_gold"]["value"] == 2


def test_a_problem_with_one_unparsed_gold_sample_is_skipped_whole(tok):
    """One sample's grading reported the gold unparseable (a transient failure, or a flaky parse): the problem
    goes, so k (the fewest samples of a graded problem) stays the benchmark's and pass@k is pass@2."""
    bench = _fake_bench("x", 2, 3, golds=["0", "1", "2"])
    gen = ScriptedGenerator(tok, right={"x-0", "x-1", "x-2"})

    def grade(pairs):
        out = boxed_match(pairs)
        out[2] = Verdict(False, "unparseable_gold")  # problem x-1's first sample only
        return out

    records, rows = evaluate_benchmarks(gen, tok, [bench], SamplingParams(max_new_tokens=8), grade,
                                        instruction="", enable_thinking=False, seed=0)
    m = _rows(rows, "x")
    assert (m["avg@k"]["n_problems"], m["avg@k"]["n_samples"], m["unparseable_gold"]["value"]) == (2, 4, 1)
    assert m["avg@k"]["value"] == 1.0 and m["pass@k"]["k"] == 2


def test_a_gold_parse_timeout_is_an_uncached_timeout_not_a_bad_gold(monkeypatch):
    from replaylab.grading import verifier
    from replaylab.grading.result import CACHEABLE

    def slow(gold, parsing_timeout):
        raise verifier._GoldTimeout("alarm")

    monkeypatch.setattr(verifier, "_parse_gold", slow)
    assert verifier.grade_prepared("boxed", "7", "7") == (False, "timeout", "gold parse timed out after 2s")
    assert "timeout" not in CACHEABLE  # so the Grader asks again instead of keeping a bad-gold verdict


def test_mismatched_generator_or_grader_output_fails_loudly(tok):
    bench = _fake_bench("x", 2, 2)
    params = SamplingParams(max_new_tokens=8)

    class Short(ScriptedGenerator):
        def generate(self, prompts, params, seed, source="fresh"):
            return super().generate(prompts, params, seed, source)[:-1]

    with pytest.raises(RuntimeError, match="expected 2 each"):
        evaluate_benchmarks(Short(tok, set()), tok, [bench], params, boxed_match,
                            instruction="", enable_thinking=False, seed=0)
    with pytest.raises(RuntimeError, match="grader returned 3 results for 4"):
        evaluate_benchmarks(ScriptedGenerator(tok, set()), tok, [bench], params, lambda p: boxed_match(p)[:3],
                            instruction="", enable_thinking=False, seed=0)
    with pytest.raises(ValueError, match="unique"):
        evaluate_benchmarks(ScriptedGenerator(tok, set()), tok, [bench, bench], params, boxed_match,
                            instruction="", enable_thinking=False, seed=0)


def test_real_hf_generator_and_grader(tok, model):
    from replaylab.grading import STATUSES, Grader

    benches = get_benchmarks(["tiny8/add2", "tiny8/add3d"])
    gen = HFGenerator(model, tok)
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    with Grader(num_workers=1) as grader:
        records, rows = evaluate_benchmarks(gen, tok, benches, params, grader, instruction="",
                                            enable_thinking=False, seed=1, samples_per_problem=2, max_problems=4)
        again, _ = evaluate_benchmarks(gen, tok, benches, params, grader, instruction="",
                                       enable_thinking=False, seed=1, samples_per_problem=2, max_problems=4)
    assert len(records) == 2 * 4 * 2 and len(rows) == 3 * len(METRICS)
    assert [r["response"] for r in records] == [r["response"] for r in again]  # seeded
    assert all(r["status"] in STATUSES for r in records)
    assert all(1 <= r["num_tokens"] <= 6 for r in records)
    assert all(r["num_tokens"] == 6 for r in records if r["truncated"])
    assert all(0 <= r["value"] <= 1 for r in rows if r["metric"] in ("avg@k", "pass@k", "truncation_rate"))


def test_truncated_responses_are_graded_by_a_complete_box_only(tok):
    """Through evaluate_benchmarks with the real Grader: an unboxed anchored answer counts for a response that
    ended and not for one the budget cut, whose flag the runner passes to the grader."""
    from replaylab.grading import Grader

    class Unboxed(ScriptedGenerator):
        def generate(self, prompts, params, seed, source="fresh"):
            groups = []
            for p in prompts:
                ids = self.tok(f"The final answer is {p.answer}", add_special_tokens=False)["input_ids"]
                cut = p.uid in self.truncate
                resp = torch.tensor(ids if cut else ids + [self.tok.eos_token_id])
                groups.append([Sample(p, resp, torch.zeros(len(resp)), 0, source, cut, f"{p.uid}-{j}") for j in range(params.n)])
            return groups

    bench = get_benchmarks(["tiny8/add2"])
    uids = [item.id for item in problem_subset(bench[0], 4)]
    gen = Unboxed(tok, right=set(), truncate=set(uids[:2]))
    with Grader(num_workers=1) as grader:
        records, _ = evaluate_benchmarks(gen, tok, bench, SamplingParams(max_new_tokens=32, temperature=0.0), grader,
                                         instruction="", enable_thinking=False, seed=0, max_problems=4)
    assert [(r["truncated"], r["correct"], r["status"]) for r in records] == \
        [(True, False, "no_answer")] * 2 + [(False, True, "ok")] * 2


def test_max_problems_evaluates_a_hashed_sample_not_a_files_first_rows(tok):
    """A benchmark ordered by difficulty (an AIME file runs by problem number): max_problems=10 of 100 took
    the 10 easiest; now a fixed sample spread over the file, the same on every call and seed, nested, in file
    order, and through evaluate_benchmarks the problems evaluated are that sample."""
    items = tuple(BenchmarkItem(f"ordered-{i:03d}", f"{i}+0=?", str(i), {"level": i // 20}) for i in range(100))
    bench = Benchmark("ordered", items, k=1, kind="math")
    ten, four = problem_subset(bench, 10), problem_subset(bench, 4)
    assert len(ten) == 10 and ten == problem_subset(bench, 10)
    assert ten != list(items[:10]) and len({it.meta["level"] for it in ten}) >= 3  # not only the first level
    assert set(four) <= set(ten) and ten == sorted(ten, key=items.index)
    assert problem_subset(bench, 100) == list(items) and problem_subset(bench, None) == list(items)
    gen = ScriptedGenerator(tok, right=set())
    records, _ = evaluate_benchmarks(gen, tok, [bench], SamplingParams(max_new_tokens=8, temperature=0.0),
                                     boxed_match, instruction="", enable_thinking=False, seed=3, max_problems=10)
    assert [r["id"] for r in records] == [it.id for it in ten]
