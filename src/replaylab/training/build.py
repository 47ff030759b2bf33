"""Build a run's components from its config: models, generator, teacher, grader, strategy, data."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch

from replaylab.config import Config
from replaylab.config_checks import DISK_PATH
from replaylab.config_fields import check
from replaylab.models import kernels, lean
from replaylab.models.loading import load_causal_lm, load_tokenizer, resolve_path
from replaylab.models.tiny_world import TINY_MODELS
from replaylab.objectives import Objective, build_objective
from replaylab.replay.base import PromptStream, build_strategy
from replaylab.results.aggregation import SAMPLED_PREFIX
from replaylab.rollout.base import SamplingParams
from replaylab.tasks.datasets import data_order, render_prompts, training_rows
from replaylab.training.components import Components
from replaylab.training.progress import on_terminal, quiet_library_bars
from replaylab.training.rollouts import prompts_per_chunk

log = logging.getLogger(__name__)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("trainer.device=cuda but no CUDA device is available; use trainer.device=cpu or auto")
    return torch.device(name)


def model_path(name_or_path: str, key: str, cfg: Config) -> str:
    """`resolve_path`, with a name that cannot load named by its key (a config error, exit 2): an unknown tiny
    model, or a local path (/, ./, ../, ~) that does not exist, which transformers reports as an OSError."""
    check(not name_or_path.startswith("tiny://") or name_or_path in TINY_MODELS, key,
          f"unknown tiny model {name_or_path!r}; allowed: {', '.join(TINY_MODELS)}")
    check(not name_or_path.startswith(DISK_PATH) or Path(name_or_path).expanduser().exists(), key,
          f"{name_or_path!r} does not exist (a local model directory; or give a hub id)")
    return resolve_path(name_or_path, cfg.tiny, progress=cfg.progress and on_terminal())


def load_policy(cfg: Config, device: torch.device):
    m = cfg.model
    path = model_path(m.name_or_path, "model.name_or_path", cfg)
    tokenizer = load_tokenizer(path, m.gguf_file, m.revision)
    model = load_causal_lm(path, m.dtype, m.gguf_file, m.revision, m.attn_implementation).to(device)
    if m.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model, tokenizer


def build_generator(cfg: Config, model, tokenizer):
    """The rollout engine. A DDP/FSDP2 policy samples through a plain gathered copy (never the
    sharded module), so ranks that generate different lengths cannot deadlock."""
    if cfg.rollout.engine == "vllm":
        from replaylab.rollout.vllm import VLLMGenerator  # GPU-only optional extra

        return VLLMGenerator.from_config(cfg, model, tokenizer)
    from replaylab import parallel as D
    from replaylab.rollout.gathered import GatheredGenerator
    from replaylab.rollout.local import local_generator

    engine, mb, compile = cfg.rollout.engine, cfg.rollout.micro_batch, cfg.rollout.compile
    if cfg.trainer.distributed == "none":
        return local_generator(engine, model, tokenizer, mb, compile)
    inner = local_generator(engine, None if D.is_fsdp(model) else D.unwrap(model), tokenizer, mb, compile)
    return GatheredGenerator(inner, model)


def build_teacher(cfg: Config, objective: Objective, device: torch.device, tokenizer):
    """The teacher the objective needs, or None (pairs that cannot work fail in config_checks)."""
    t = cfg.teacher
    if not objective.needs_teacher:
        return None
    if t.kind == "server":
        from replaylab.teacher.server import ServerTeacher

        teacher = ServerTeacher(t.server_url, t.name_or_path, micro_batch=t.micro_batch)
        teacher.check_tokenizer(tokenizer)  # also fails in seconds on a server that is down or misnamed
        return teacher
    from replaylab.teacher.local import LocalTeacher

    path = model_path(t.name_or_path, "teacher.name_or_path", cfg)
    teacher_tok = load_tokenizer(path, None, t.revision)
    if teacher_tok.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"teacher {t.name_or_path!r} and student {cfg.model.name_or_path!r} use different tokenizers; "
                         "OPD scores the student's tokens with the teacher, so they must share one")
    model = load_causal_lm(path, t.dtype, None, t.revision).to(device)
    return LocalTeacher(model, tokenizer.pad_token_id, micro_batch=t.micro_batch)


def build_grader(cfg: Config):
    from replaylab.grading import Grader

    return Grader(num_workers=cfg.eval.grader_workers, timeout_seconds=cfg.eval.grader_timeout)


def evaluated_benchmarks(cfg: Config) -> list:
    """The benchmarks the run evaluates on (eval.benchmarks, else the suite's), loaded once: the evaluation scores
    them and the training set leaves their questions out."""
    from replaylab.evaluation.benchmarks import get_benchmarks

    e = cfg.eval
    names = list(e.benchmarks) or ([] if e.suite == "none" else e.suite)
    return get_benchmarks(names, e.data_root or cfg.data.data_root) if names else []


def training_prompt_rows(cfg: Config, benchmarks: list | None = None) -> list[dict[str, str]]:
    """The training prompt set, without the questions of the benchmarks the run evaluates on (said in the log)."""
    from replaylab.tasks.datasets import normalised

    benchmarks = evaluated_benchmarks(cfg) if benchmarks is None else benchmarks
    held_out = frozenset(normalised(item.question) for bench in benchmarks for item in bench.items)
    rows, dropped = training_rows(cfg.data.name, cfg.data.size, cfg.data.seed, cfg.data.data_root, held_out)
    if dropped:
        log.warning("replaylab: %d problem(s) of data.name=%s are questions of the evaluated benchmarks and are left out "
                    "of training: %s", len(dropped), cfg.data.name, ", ".join(dropped[:10]) + (" ..." if len(dropped) > 10 else ""))
    return rows


def data_fingerprints(cfg: Config, benchmarks: list | None = None, rows: list | None = None) -> tuple[str, str]:
    """(eval_data, train_data): fingerprints of the evaluated benchmarks' problems and golds ("" when none) and
    of the training problems in the run's data order. No config names the data itself (a data root, an edited
    or regenerated file): rows carry both, and a finished run is checked against them before it is skipped.
    Loads only the data, in seconds."""
    from replaylab.evaluation.benchmarks import benchmarks_fingerprint
    from replaylab.tasks.datasets import data_order, rows_fingerprint

    benchmarks = evaluated_benchmarks(cfg) if benchmarks is None else benchmarks
    rows = training_prompt_rows(cfg, benchmarks) if rows is None else rows
    return (benchmarks_fingerprint(benchmarks) if benchmarks else "",
            rows_fingerprint(rows, data_order(len(rows), cfg.order)))


def build_evaluate(cfg: Config, generator, tokenizer, grader, benchmarks: list | None = None):
    """A callable(update) -> [(benchmark, metrics, n)] for the trainer's periodic evaluation (None: nothing to
    evaluate); `benchmarks` as `evaluated_benchmarks` loads them."""
    benchmarks = evaluated_benchmarks(cfg) if benchmarks is None else benchmarks
    if not benchmarks:
        return None
    from replaylab.evaluation.runner import evaluate_benchmarks

    e = cfg.eval
    # (metric prefix, decoding, samples per problem): the main evaluation, and the sampled one beside
    # it (plain sampling at eval.sampled_temperature: top-p / top-k belong to the main decoding)
    passes = [("", SamplingParams(e.max_new_tokens, e.temperature, e.top_p, e.top_k), e.samples or None)]
    if e.sampled_k:
        passes.append((SAMPLED_PREFIX, SamplingParams(e.max_new_tokens, e.sampled_temperature), e.sampled_k))

    def evaluate(update: int):
        by_bench: dict[str, tuple[dict, dict]] = {}
        for index, (prefix, params, k) in enumerate(passes):
            # The seed depends on the update only: every strategy of a sweep draws the same random
            # numbers at the same evaluation, which pairing by data order then cancels.
            _, rows = evaluate_benchmarks(
                generator, tokenizer, benchmarks, params, grader, instruction=e.instruction,
                enable_thinking=e.enable_thinking, seed=cfg.trainer.seed + 7919 * update + index,
                samples_per_problem=k, max_problems=e.max_problems or None,
            )
            for r in rows:
                metrics, n = by_bench.setdefault(r["benchmark"], ({}, {}))
                metrics[prefix + r["metric"]] = r["value"]
                n[prefix + r["metric"]] = r.get("n_samples")
        return [(b, m, n) for b, (m, n) in by_bench.items()]

    return evaluate


def build_components(cfg: Config) -> Components:
    from replaylab import parallel as D

    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    if not (cfg.progress and on_terminal()):
        quiet_library_bars()
    info = D.init_from_env(cfg.trainer.device, cfg.trainer.dist_timeout_s)
    check(cfg.trainer.distributed == "none" or info.world_size > 1, "trainer.distributed",
          f"{cfg.trainer.distributed} needs several processes: launch with torchrun --nproc_per_node=N -m "
          "replaylab.train ... (or launcher=slurm with tasks_per_node=N)")
    t = cfg.trainer
    chunks = -(-t.prompts_per_iteration // prompts_per_chunk(cfg.rollout.micro_batch, t.samples_per_prompt))
    check(chunks >= info.world_size, "rollout.micro_batch",
          f"{cfg.rollout.micro_batch} cuts an iteration's {t.prompts_per_iteration} prompts x {t.samples_per_prompt} into "
          f"{chunks} seeded chunk(s) (training/rollouts.generate_sharded), fewer than the {info.world_size} ranks: the "
          f"others would neither generate nor score; set rollout.micro_batch <= "
          f"{max(1, t.prompts_per_iteration // info.world_size) * t.samples_per_prompt}")
    device = info.device if info.world_size > 1 else pick_device(cfg.trainer.device)
    kernels.use(cfg.trainer.matmul, device)
    strategy = build_strategy(cfg.strategy)
    objective = build_objective(cfg.trainer, cfg.budget.max_response_tokens, cfg.rollout.temperature)
    benchmarks = evaluated_benchmarks(cfg)  # data first: a bad file is named in seconds, before any model loads
    rows = training_prompt_rows(cfg, benchmarks)
    policy, tokenizer = load_policy(cfg, device)
    # Frozen copies (KL reference, initial policy) are taken before the policy is wrapped.
    ref = copy.deepcopy(policy).eval().requires_grad_(False) if objective.needs_reference() else None
    initial = copy.deepcopy(policy).eval().requires_grad_(False) if strategy.needs_initial_policy else None
    if cfg.trainer.distributed != "none":
        policy = D.wrap_model(policy, cfg.trainer.distributed, device)
    generator = build_generator(cfg, policy, tokenizer)
    teacher = build_teacher(cfg, objective, device, tokenizer)
    grader = build_grader(cfg)
    prompts = render_prompts(rows, tokenizer, cfg.data.instruction, cfg.data.enable_thinking)
    stream = PromptStream(prompts, data_order(len(prompts), cfg.order))
    evaluate = build_evaluate(cfg, generator, tokenizer, grader, benchmarks)
    # The initial policy samples through an in-process generator even when rollouts use vLLM: a second
    # colocated engine would need its own GPU memory budget. On resume the policy is loaded from its
    # initial weights before the checkpoint overwrites it, so this copy is the same either way.
    initial_generator = None
    if initial is not None:
        from replaylab.rollout.local import in_process_engine, local_generator

        initial_generator = local_generator(in_process_engine(cfg.rollout.engine), initial, tokenizer, cfg.rollout.micro_batch,
                                            cfg.rollout.compile)
    if cfg.trainer.forward != "module":
        attach_lean_forwards(cfg, policy, ref, teacher.distribution_model() if teacher is not None else None)
    return Components(policy, tokenizer, generator, teacher, grader, strategy, stream, evaluate, ref, initial_generator,
                      objective, *data_fingerprints(cfg, benchmarks, rows))


def attach_lean_forwards(cfg: Config, policy, ref, teacher_model) -> None:
    """The lean forward (models/lean.py) for every model that can take it; `pruned` asks for it on the policy."""
    pruned = cfg.trainer.forward == "pruned"
    # A wrapped (DDP/FSDP2) policy runs its own forward: its hooks sync gradients and gather shards.
    why = "trainer.distributed wraps it" if cfg.trainer.distributed != "none" else lean.trainable_reason(policy)
    check(not (pruned and why), "trainer.forward", f"'pruned' needs the lean forward on the policy, which cannot take it: {why}")
    for model in (policy if not why else None, ref, teacher_model):
        if model is not None and lean.attach(model):
            lean.lean_forward_of(model).prune = "always" if pruned else "no_grad"
    # The lean forward and rollout=fast's lean decoder (which also samples the initial policy's copy) compute
    # attention themselves: with both, no transformers attention of the policy ever runs. (Under vLLM the
    # initial policy's copy samples through rollout=hf, so there it can act.)
    attn = cfg.model.attn_implementation
    check(not attn or why is not None or cfg.rollout.engine != "fast", "model.attn_implementation",
          f"{attn!r} has no effect: the policy trains through the lean forward (trainer.forward={cfg.trainer.forward}) and "
          "samples through rollout=fast's decoder, neither of which runs transformers' attention: set it to null "
          "(a model group may set it), or use trainer.forward=module or rollout=hf to run it")
