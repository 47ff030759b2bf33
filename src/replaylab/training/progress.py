"""How a run shows it is alive: a progress bar on a terminal, a periodic one-line status otherwise.

A redirected log (`> log.txt`, a SLURM output file, Hydra's job log) gets no carriage-return frames:
about ten status lines over the run through `logging`, each with the update, the objective's
headline numbers and the rate. `progress=false` silences both (evaluation lines still appear).
"""

from __future__ import annotations

import logging
import sys
import time

from tqdm.auto import tqdm

log = logging.getLogger("replaylab.train")
HEADLINE = ("reward", "reverse_kl", "tokens_per_s")


def on_terminal() -> bool:
    return sys.stderr.isatty()


def quiet_library_bars() -> None:
    """transformers' "Loading weights" / "Writing model shards" bars and huggingface_hub's download
    bars: off for this process (they ignore replaylab's `progress`)."""
    import transformers
    from huggingface_hub.utils import disable_progress_bars

    transformers.utils.logging.disable_progress_bar()
    disable_progress_bars()


class Progress:
    def __init__(self, enabled: bool, total: int, initial: int, desc: str, lines: int = 10):
        self.total, self.desc = total, desc
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="upd") if enabled and on_terminal() else None
        self.status = enabled and self.bar is None
        self.every = max(1, total // lines)
        self.start_update, self.t0 = initial, time.perf_counter()

    def update(self, done: int, new_update: int, metrics: dict[str, float]) -> None:
        shown = {k: f"{metrics[k]:.3g}" for k in HEADLINE if k in metrics}
        if self.bar is not None:
            self.bar.update(new_update - done)
            self.bar.set_postfix(shown)
        elif self.status and new_update // self.every > done // self.every:
            rate = (new_update - self.start_update) / max(1e-9, time.perf_counter() - self.t0)
            left = (self.total - new_update) / rate if rate > 0 else float("nan")
            numbers = " ".join(f"{k} {v}" for k, v in shown.items())
            log.info("%s: update %d/%d %s| %.2f upd/s, about %.0f s left", self.desc, new_update, self.total,
                     numbers + " " if numbers else "", rate, left)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
