"""What a table must say about where its runs came from, beside its numbers: the versions they ran on,
how they were evaluated and on which problems, what they trained on, how they ended, and which
directories were left out. Each note is one sentence, or None when there is nothing to say; tables,
paired tables and the claims report print them under their numbers (`run_notes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def versions_note(df: pd.DataFrame) -> str | None:
    """A sentence naming the versions (code, libraries, CPU, matmul kernel) a frame's runs came from, when
    there is more than one: runs reproduce bitwise only within one, so a table that averages across them
    says how many runs each contributed, by the parts of `versions` that differ."""
    if "versions" not in df.columns:
        return None
    per_run = df.drop_duplicates("run")["versions"].dropna().astype(str)
    counts = per_run.value_counts()
    if len(counts) < 2:
        return None
    common = set.intersection(*(set(v.split()) for v in counts.index))
    parts = [f"{n} run{'s' if n > 1 else ''} of `{' '.join(t for t in v.split() if t not in common) or v}`"
             for v, n in counts.items()]
    return (f"Runs from {len(counts)} versions (rows' `versions`; numbers reproduce bitwise only within one): "
            + "; ".join(parts) + ".")


def budget_note(df: pd.DataFrame) -> str | None:
    """A sentence when a frame's finished runs did not all end on the same budget (done markers'
    `ended_by`), or ended at their update cap before the compute or trajectory budget they were set to
    match on: their strategies were then not compared at one matched budget (a replay arm that stops
    at `budget.max_updates` has spent less compute than a baseline that reached `budget.max_compute`)."""
    if "ended_by" not in df.columns:
        return None
    counts = df.drop_duplicates("run")["ended_by"].dropna().astype(str).value_counts()
    if len(counts) < 2 and not any(v.endswith(")") for v in counts.index):
        return None
    parts = [f"{n} run{'s' if n > 1 else ''} at {v}" for v, n in counts.items()]
    return ("Runs ended on different budgets (done.json's `ended_by`), so they are not compared at one matched "
            "budget: " + "; ".join(parts) + ".")


def eval_note(df: pd.DataFrame) -> str | None:
    """A sentence when a frame's runs of one budget were evaluated in more than one way (rows' `eval_setting`):
    their accuracies are not on one scale, whichever rows of the table they land in. Budgets are the tables'
    blocks, and a sweep's evaluation budget often follows its response budget (tiny_ropd), so settings that
    differ only between budgets are not remarked."""
    import pandas as pd

    if "eval_setting" not in df.columns:
        return None
    runs = df.drop_duplicates("run").dropna(subset=["eval_setting"])
    blocks = runs.groupby(runs["budget"].astype(str) if "budget" in runs.columns else 0)
    mixed = [part for _, part in blocks if part["eval_setting"].nunique() > 1]
    if not mixed:
        return None
    counts = pd.concat(mixed)["eval_setting"].astype(str).value_counts()
    return ("Runs of one budget evaluated in different ways (rows' `eval_setting`), whose accuracies do not compare: "
            + "; ".join(f"{n} run{'s' if n > 1 else ''} as `{v}`" for v, n in counts.items()) + ".")


def data_note(df: pd.DataFrame) -> str | None:
    """Sentences when runs that a table sets side by side saw different data without any config saying so
    (another data root, an edited or regenerated file): runs of one budget scored on other benchmark
    problems or golds (rows' `eval_data`), or runs of one data set and order trained on other prompt streams
    (rows' `train_data`), which then do not pair by order. Runs from before the columns are not checked."""
    runs = df.drop_duplicates("run")
    notes = []
    if "eval_data" in runs.columns:
        scored = runs.dropna(subset=["eval_data"])
        blocks = scored.groupby(scored["budget"].astype(str) if "budget" in scored.columns else 0)
        counts = [part["eval_data"].value_counts() for _, part in blocks if part["eval_data"].nunique() > 1]
        if counts:
            notes.append("Runs of one budget scored on different benchmark problems or golds (rows' `eval_data`), "
                         "whose accuracies do not compare: " + "; ".join(
                             f"{n} run{'s' if n > 1 else ''} on `{v}`" for c in counts for v, n in c.items()) + ".")
    if "train_data" in runs.columns:
        trained = runs.dropna(subset=["train_data"])
        keys = [k for k in ("data", "order") if k in trained.columns]
        mixed = [(key, part["train_data"].value_counts()) for key, part in trained.groupby(keys, dropna=False)
                 if part["train_data"].nunique() > 1] if keys else []
        if mixed:
            notes.append("Runs of one data set and order trained on different prompt streams (rows' `train_data`: "
                         "another data root or file), so they do not pair by order: " + "; ".join(
                             f"{dict(zip(keys, key if isinstance(key, tuple) else (key,)))}: "
                             + ", ".join(f"{n} on `{v}`" for v, n in c.items()) for key, c in mixed) + ".")
    return " ".join(notes) or None


def evaluations_note(df: pd.DataFrame) -> str | None:
    """A sentence naming the `replaylab evaluate` directories load_experiment left out beside the training runs."""
    left_out = df.attrs.get("evaluations_left_out")
    if not left_out:
        return None
    return (f"Left out {len(left_out)} `replaylab evaluate` director{'ies' if len(left_out) > 1 else 'y'}, no strategy of "
            f"these runs (table one on its own to see it): {', '.join(left_out)}.")


def run_notes(df: pd.DataFrame) -> str | None:
    """What a table over `df` must say about where its runs came from, how they were evaluated and how they ended."""
    notes = [n for n in (versions_note(df), eval_note(df), data_note(df), budget_note(df), evaluations_note(df)) if n]
    return " ".join(notes) or None
