"""Execute the analysis notebooks headless: `python analysis/run_notebooks.py EXPERIMENT_DIR`.

Each notebook runs in a fresh kernel of *this* interpreter (so the venv's replaylab, pandas and
matplotlib are the ones used, whatever other `python3` kernelspecs the user has registered), in
the repository root, with REPLAYLAB_EXPERIMENT_DIR and REPLAYLAB_FIGURES_DIR set. The first cell
error stops everything with the notebook's name and the failing cell's traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NOTEBOOKS = ("tables", "curves", "diagnostics")


class NotebookFailed(RuntimeError):
    """A cell raised: the message names the notebook and carries the cell's traceback."""


def kernel_manager():
    """A python3 kernel manager bound to sys.executable: ipykernel's built-in spec, with the
    registered kernelspec directories ignored (a user-level `python3` may be another Python)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    return KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[]))


def run_notebook(path: Path, env: dict[str, str], timeout: int = 600, executed_dir: Path | None = None) -> float:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, km=kernel_manager(), timeout=timeout, resources={"metadata": {"path": str(REPO)}},
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])  # no per-kernel transport warning
    t0 = time.time()
    try:
        client.execute(env=env)
    except CellExecutionError as e:
        raise NotebookFailed(f"{path.name} failed:\n{e}") from None
    finally:
        if executed_dir is not None:
            executed_dir.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, executed_dir / path.name)
    return time.time() - t0


def run_notebooks(experiment_dir: str | Path, figures_dir: str | Path | None = None,
                  names: tuple[str, ...] = NOTEBOOKS, executed_dir: Path | None = None) -> dict[str, float]:
    """Run the named notebooks on `experiment_dir` (or on a wandb source: a runs-table CSV export,
    wandb:ENTITY/PROJECT or wandb-offline:DIR); returns seconds per notebook."""
    text = str(experiment_dir)
    if text.startswith(("wandb:", "wandb-offline:")) or text.endswith(".csv"):
        env = {**os.environ, "REPLAYLAB_SOURCE": text, "MPLBACKEND": "Agg"}
    else:
        experiment_dir = Path(experiment_dir).resolve()
        if not experiment_dir.is_dir():
            raise FileNotFoundError(f"{experiment_dir}: no such experiment directory; no rows found")
        env = {**os.environ, "REPLAYLAB_EXPERIMENT_DIR": str(experiment_dir), "MPLBACKEND": "Agg"}
        env.pop("REPLAYLAB_SOURCE", None)
    if figures_dir is not None:
        env["REPLAYLAB_FIGURES_DIR"] = str(Path(figures_dir).resolve())
    return {name: run_notebook(HERE / f"{name}.ipynb", env, executed_dir=executed_dir) for name in names}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment_dir", help="e.g. runs/tiny_ropd, or a wandb source: export.csv, wandb:ENTITY/PROJECT, "
                                          "wandb-offline:runs/tiny_ropd")
    p.add_argument("--figures", help="where PNGs go (default: REPLAYLAB_FIGURES_DIR or analysis/figures)")
    p.add_argument("--executed", type=Path, help="also save the executed notebooks (with outputs) here")
    p.add_argument("--only", help="comma-separated subset of " + ",".join(NOTEBOOKS))
    args = p.parse_args()
    names = tuple(args.only.split(",")) if args.only else NOTEBOOKS
    try:
        times = run_notebooks(args.experiment_dir, args.figures, names, args.executed)
    except (NotebookFailed, FileNotFoundError) as e:
        print(f"run_notebooks: {e}", file=sys.stderr)
        return 1
    for name, seconds in times.items():
        print(f"{name}.ipynb: ok ({seconds:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
