"""Objectives are registered objects: a fourth one is one module (here, this test) plus a config."""

from __future__ import annotations

import pytest

from conftest import compose, load_rows
from replaylab.models.batching import collate, pad_per_token, response_logits, token_logprobs
from replaylab.config import ConfigError, to_object
from replaylab.objectives import OBJECTIVES, objective_class
from replaylab.objectives.opd import TeacherScored


class SquaredLogRatio(TeacherScored):  # score() asks the teacher
    """A toy OPD objective: 0.5 * token-mean of (log pi_theta(y) - log pi_T(y))^2 on the sampled tokens."""

    name = "toy_squared_log_ratio"

    def loss(self, model, samples, pad_id, reference=None, batch=None):
        batch = collate(samples, pad_id)
        logp = token_logprobs(response_logits(model, batch), batch.response_ids, self.temperature)
        teacher = pad_per_token([s.teacher_logprobs for s in samples], batch.response_ids.shape[1])
        mask = batch.response_mask
        loss = 0.5 * (((logp - teacher) ** 2) * mask).sum() / mask.sum()
        return loss, {"squared_log_ratio": float(loss.detach())}


@pytest.fixture
def toy():
    from replaylab.objectives import register_objective

    register_objective(SquaredLogRatio)
    yield SquaredLogRatio
    del OBJECTIVES[SquaredLogRatio.name]


def test_a_fourth_objective_trains_through_the_real_loop(run_train, toy):
    summary, path = run_train(["trainer=opd_sampled", f"trainer.objective={toy.name}", "budget.max_updates=2"])
    assert summary["update"] == 2 and summary["teacher_tokens_scored"] > 0
    values = [r["value"] for r in load_rows(path) if r["split"] == "train" and r["metric"] == "squared_log_ratio"]
    assert len(values) == 2 and all(v > 0 for v in values)
    cfg = to_object(compose(["trainer=opd_sampled", f"trainer.objective={toy.name}"]))
    assert cfg.trainer.kind == "opd"  # derived from the objective's family


def test_unknown_objective_and_settings_it_does_not_read_fail_at_config_time(toy):
    with pytest.raises(ConfigError, match="trainer.objective"):
        to_object(compose(["trainer.objective=nonexistent"]))
    with pytest.raises(ConfigError, match="trainer.clip_high"):  # the toy reads no clip
        to_object(compose(["trainer=opd_sampled", f"trainer.objective={toy.name}", "trainer.clip_high=0.28"]))


def test_every_trainer_preset_names_a_registered_objective():
    from pathlib import Path

    from replaylab.paths import conf_dir

    for preset in sorted(Path(conf_dir(), "trainer").glob("*.yaml")):
        cfg = to_object(compose([f"trainer={preset.stem}", "teacher=none"] if "grpo" in preset.stem else [f"trainer={preset.stem}"]))
        cls = objective_class(cfg.trainer.objective)
        assert cfg.trainer.kind == cls.family
