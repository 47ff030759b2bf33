"""A trivial Hydra app on replaylab's config tree, for rehearsing a multi-task submitit job.

    PROBE_OUT=DIR python tests/scripts/submitit_probe.py -m launcher=submitit_local \\
        hydra.launcher.tasks_per_node=2 output_root=...

Each task (one process per task) records what submitit told it, turns that into torchrun's
variables with `replaylab.parallel.init_from_env` (gloo), and all-reduces its rank to prove
the tasks really form one process group. No model is loaded: it only checks the launch plumbing
a multi-GPU training cell relies on. Writes DIR/order<o>-rank<r>.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

from replaylab.config import register_configs
from replaylab.paths import conf_dir

register_configs()


@hydra.main(version_base=None, config_path=conf_dir(), config_name="config")
def main(cfg: DictConfig) -> dict:
    import submitit
    import torch

    from replaylab import parallel as D

    torch.set_num_threads(1)
    job = submitit.JobEnvironment()
    info = D.init_from_env("cpu", timeout_s=60)
    record = {
        "global_rank": job.global_rank, "local_rank": job.local_rank, "num_tasks": job.num_tasks,
        "job_id": job.job_id,
        "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")},
        "dist_rank": info.rank, "dist_world": info.world_size, "backend": info.backend,
        "rank_sum": D.all_reduce_sum(float(info.rank + 1)), "order": cfg.order,
    }
    out = Path(os.environ["PROBE_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"order{cfg.order}-rank{info.rank}.json").write_text(json.dumps(record))
    D.destroy()
    return record


if __name__ == "__main__":
    main()
