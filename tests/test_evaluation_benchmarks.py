"""The benchmark registry: row counts from the shared data root, suites, gold repairs, and errors that
name what to fix (unknown names, a missing root or file, a malformed row with its file and line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replaylab.tasks import data_root as data_mod
from replaylab.evaluation.benchmarks import (
    MATH_INSTRUCTION,
    benchmark_names,
    get_benchmark,
    get_benchmarks,
    get_suite,
)
from replaylab.grading import Grader
from replaylab.tasks.data_root import DATA_ROOT_ENV, default_data_root, load_train_rows
from replaylab.tasks.tiny8 import TINY8_SETS, tiny8_set

MATH8_ROWS = {
    "aime2024": 30,
    "aime2025": 30,
    "hmmt_feb_2025": 30,
    "brumo2025": 30,
    "amc2023": 40,
    "math500": 500,
    "minerva_math": 272,
    "olympiadbench": 675,
}

shared_root = default_data_root()
needs_data = pytest.mark.skipif(shared_root is None, reason=f"no math data root (set {DATA_ROOT_ENV})")


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _row(i: int, **over) -> str:
    row = {"id": f"aime2024-{i:04d}", "problem": f"What is {i}+1?", "answer": str(i + 1), "source": "test"}
    row.update(over)
    return json.dumps({k: v for k, v in row.items() if v is not None})


@needs_data
def test_math8_loads_with_manifest_row_counts():
    benches = get_benchmarks("math8", shared_root)
    assert [b.name for b in benches] == list(MATH8_ROWS)
    for b in benches:
        assert len(b) == MATH8_ROWS[b.name], b.name
        assert b.kind == "math"
        assert len({it.id for it in b.items}) == len(b)
        assert all(it.question and it.answer for it in b.items)
    ks = {b.name: b.k for b in benches}
    assert ks["aime2024"] == ks["amc2023"] == ks["hmmt_feb_2025"] == ks["brumo2025"] == 16
    assert ks["math500"] == ks["minerva_math"] == ks["olympiadbench"] == 4


@needs_data
def test_extra_math_sets_and_training_sets_load():
    assert (len(get_benchmark("gsm8k", shared_root)), get_benchmark("gsm8k", shared_root).k) == (1319, 1)
    for name, rows in {"cmimc2025": 40, "aime2026": 30}.items():
        b = get_benchmark(name, shared_root)
        assert (len(b), b.k) == (rows, 16)
    for name, rows in {"math_train": 7470, "gsm8k_train": 7473, "aime_1983_2023": 975}.items():
        train = load_train_rows(name, shared_root)
        assert len(train) == rows
        assert set(train[0]) == {"id", "problem", "answer"}


@needs_data
def test_gold_repairs_keep_the_raw_answer():
    minerva = {it.meta.get("answer_raw"): it.answer for it in get_benchmark("minerva_math", shared_root).items}
    assert minerva["4.5e33"] == "4.5 \\times 10^{33}"
    assert minerva["1e-5"] == "1 \\times 10^{-5}"
    assert minerva["np.arcsin(10/13)"] == "\\arcsin(10/13)"
    assert (minerva["-1./3"], minerva["-3./2"]) == ("-\\frac{1}{3}", "-\\frac{3}{2}")
    with Grader(num_workers=1) as grader:  # math-verify read "-1./3" as -1
        verdicts = [r.correct for r in grader.grade([(f"\\boxed{{{p}}}", minerva["-1./3"]) for p in ("-1/3", "-1", "-0.5")])]
    assert verdicts == [True, False, False]
    olymp = {it.meta.get("answer_raw"): it.answer for it in get_benchmark("olympiadbench", shared_root).items}
    assert olymp["$69$,$84$"] == "69,84"
    untouched = get_benchmark("aime2024", shared_root).items[0]
    assert "answer_raw" not in untouched.meta and "solution" not in untouched.meta


def test_tiny8_suite_matches_the_tiny_sets():
    names = get_suite("tiny8")
    assert names == [f"tiny8/{s}" for s in TINY8_SETS]
    for name, s in zip(names, TINY8_SETS):
        b = get_benchmark(name)  # no data root needed
        assert (b.kind, b.k, len(b)) == ("tiny", 1, 300)
        assert [(it.id, it.question, it.answer) for it in b.items] == [
            (p.uid, p.question, p.answer) for p in tiny8_set(s)
        ]


def test_registry_lists_every_name_and_suite():
    assert set(benchmark_names()) >= set(MATH8_ROWS) | {"gsm8k", "cmimc2025", "aime2026"} | set(get_suite("tiny8"))
    assert get_suite("math8") == list(MATH8_ROWS)
    assert "\\boxed{}" in MATH_INSTRUCTION


def test_unknown_names_list_the_allowed_ones():
    with pytest.raises(KeyError, match="unknown benchmark 'aime2023'.*aime2024.*tiny8/add2"):
        get_benchmark("aime2023")
    with pytest.raises(KeyError, match="unknown benchmark suite 'math7'.*math8.*tiny8"):
        get_suite("math7")
    with pytest.raises(KeyError, match="unknown training prompt set 'dapo'.*math_train"):
        load_train_rows("dapo")


def test_missing_root_and_file_say_how_to_set_the_root(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as e:
        get_benchmark("aime2024", missing)
    assert str(missing) in str(e.value) and "eval.data_root" in str(e.value) and DATA_ROOT_ENV in str(e.value)

    with pytest.raises(FileNotFoundError) as e:
        get_benchmark("aime2024", tmp_path)  # the root exists, the file does not
    assert str(tmp_path / "aime2024.jsonl") in str(e.value) and DATA_ROOT_ENV in str(e.value)

    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)
    monkeypatch.setattr(data_mod, "default_data_root", lambda: None)
    with pytest.raises(FileNotFoundError, match="no math data root.*eval.data_root.*REPLAYLAB_DATA_ROOT"):
        get_benchmark("aime2024")


def test_env_var_sets_the_default_root(tmp_path, monkeypatch):
    _write(tmp_path / "aime2024.jsonl", [_row(i) for i in range(30)])
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))
    b = get_benchmark("aime2024")
    assert len(b) == 30 and b.items[2].answer == "3" and b.items[2].meta["source"] == "test"


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"id": "x", "problem": "p", "answer": ', "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        (_row(2, answer=None), "missing key 'answer'"),
        (_row(2, problem=None), "missing key 'problem'"),
        (_row(2, answer=""), "key 'answer' must be a non-empty string"),
        (_row(2, answer=17), "key 'answer' must be a non-empty string"),
        (_row(0), "key 'id' value 'aime2024-0000' repeats line 1"),
    ],
)
def test_malformed_row_names_file_line_and_key(tmp_path, bad, message):
    path = _write(tmp_path / "aime2024.jsonl", [_row(0), "", bad] + [_row(i) for i in range(3, 30)])
    with pytest.raises(ValueError) as e:
        get_benchmark("aime2024", tmp_path)
    assert f"{path}:3" in str(e.value)
    assert message in str(e.value)


def test_row_count_mismatch_is_an_error(tmp_path):
    path = _write(tmp_path / "amc2023.jsonl", [_row(i) for i in range(83)])
    with pytest.raises(ValueError, match=f"{path}: 83 rows, expected 40"):
        get_benchmark("amc2023", tmp_path)


def test_training_rows_are_validated_like_benchmarks(tmp_path):
    path = _write(tmp_path / "aime_1983_2023.jsonl", [_row(0), _row(1, answer=None)])
    with pytest.raises(ValueError) as e:
        load_train_rows("aime_1983_2023", tmp_path)
    assert f"{path}:2" in str(e.value) and "'answer'" in str(e.value)


def _training_root(tmp_path: Path) -> Path:
    """A data root with aime2024 (30 problems) and an aime_1983_2023 of 975 whose rows 900-902 ask three of
    aime2024's questions (in other case and spacing, in math delimiters $ $ and \\( \\)), as the real
    file holds seven of MATH-500's; row 903 asks 3+10, not 31+0 (the operators count)."""
    _write(tmp_path / "aime2024.jsonl", [_row(i) for i in range(30)])
    train = [json.dumps({"id": f"aime-{i:04d}", "problem": f"Find {i} times 7.", "answer": str(7 * i)}) for i in range(975)]
    for i, text in zip((900, 901, 902, 903), ("  WHAT is 3+1?\n", "What is $14 + 1$?", r"What is \(27+1\)?",
                                              "What is 3+10?")):
        train[i] = json.dumps({"id": f"aime-{i:04d}", "problem": text, "answer": "0"})
    _write(tmp_path / "aime_1983_2023.jsonl", train)
    return tmp_path


def test_training_leaves_out_the_questions_it_is_evaluated_on_and_says_so(tmp_path, caplog):
    """Through the trainer's build step (training.build.training_prompt_rows) with a composed config: the three
    training problems that ask aime2024's questions are left out and named in the log; without that
    benchmark among the evaluated ones, nothing is."""
    from conftest import compose

    from replaylab.config import to_object
    from replaylab.training.build import training_prompt_rows

    root = _training_root(tmp_path)
    base = ["data=aime_1983_2023", f"data.data_root={root}"]
    rows = training_prompt_rows(to_object(compose(base + ["eval.benchmarks=[aime2024]"])))
    assert len(rows) == 972 and not {"aime-0900", "aime-0901", "aime-0902"} & {r["id"] for r in rows}
    assert "aime-0903" in {r["id"] for r in rows}
    assert "3 problem(s) of data.name=aime_1983_2023 are questions of the evaluated benchmarks" in caplog.text
    assert "aime-0900, aime-0901, aime-0902" in caplog.text
    assert len(training_prompt_rows(to_object(compose(base + ["eval.suite=none"])))) == 975


def test_data_size_takes_a_fixed_sample_by_id_not_the_files_first_rows(tmp_path):
    """data.size on a file: the same 100 problems every time, spread over the file (MATH's training file runs
    by subject: its first 1,024 rows are all Algebra), nested in a larger sample."""
    from replaylab.tasks.datasets import training_rows

    root = _training_root(tmp_path)
    hundred, _ = training_rows("aime_1983_2023", 100, 0, str(root))
    again, _ = training_rows("aime_1983_2023", 100, 5, str(root))  # another data.seed: the same problems
    ids = [int(r["id"].split("-")[1]) for r in hundred]
    assert len(hundred) == 100 and hundred == again and ids == sorted(ids)
    assert max(ids) > 800 and ids != list(range(100))
    assert {r["id"] for r in hundred} <= {r["id"] for r in training_rows("aime_1983_2023", 300, 0, str(root))[0]}
