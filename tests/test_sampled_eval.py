"""eval.sampled_k: a sampled avg@k beside the greedy evaluation, through a real training run, and
read back by the comparison table."""

from __future__ import annotations

from conftest import load_rows
from replaylab.results.aggregation import is_accuracy


def _eval(run_dir) -> dict[tuple[int, str, str], tuple[float, int]]:
    return {(r["update"], r["benchmark"], r["metric"]): (r["value"], r["n"]) for r in load_rows(run_dir) if r["split"] == "eval"}


def test_sampled_evaluation_beside_greedy_paired_across_strategies(run_train):
    _, current = run_train(["eval.sampled_k=3", "budget.max_updates=2"])
    _, initial = run_train(["eval.sampled_k=3", "budget.max_updates=2", "strategy=initial"])
    a, b = _eval(current), _eval(initial)
    greedy, n_greedy = a[(0, "tiny8/add2", "avg@k")]
    sampled, n_sampled = a[(0, "tiny8/add2", "sampled_avg@k")]
    assert n_greedy == 4 and n_sampled == 12  # eval.max_problems=4, three samples each
    for update in (0, 2):
        for metric in ("sampled_avg@k", "sampled_pass@k", "sampled_se", "sampled_ci_low"):
            assert (update, "mean", metric) in a
    # drawn at temperature 1, not argmaxed: the micro world's greedy responses all run to the budget, sampled ones stop
    assert a[(0, "mean", "sampled_truncation_rate")][0] < a[(0, "mean", "truncation_rate")][0]
    # the same policy at update 0, the same random numbers: identical for every strategy (pairing cancels them)
    assert {k: v for k, v in a.items() if k[0] == 0} == {k: v for k, v in b.items() if k[0] == 0}
    assert is_accuracy("sampled_se") and is_accuracy("sampled_avg@k") and not is_accuracy("sampled_mean_response_tokens")


def test_sampled_metric_in_the_table(run_train, capsys):
    from replaylab.cli.main import main

    _, path = run_train(["eval.sampled_k=2", "budget.max_updates=2", "experiment=sampled"])
    assert main(["table", str(path.parent), "--metric", "sampled_avg@k", "--benchmark", "mean", "--format", "markdown",
                 "--out", str(path.parent / "tables")]) == 0
    out = capsys.readouterr().out
    assert "sampled_avg@k" in out and "nan" not in out.lower()
