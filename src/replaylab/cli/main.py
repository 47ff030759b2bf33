"""The `replaylab` command: small tools around the Hydra entry points.

    replaylab grade INPUT.jsonl --out OUTPUT.jsonl   grade existing generations
    replaylab tiny                                   build (or find) the tiny world and report it
    replaylab table EXPERIMENT_DIR                   the comparison table of a sweep
    replaylab show RUN_DIR                           a run's before/after accuracy, budget and figure
    replaylab figures EXPERIMENT_DIR                 a sweep's accuracy-vs-update and diagnostics figures
    replaylab config-help [GROUP]                    every config field with its help text
    replaylab export RUN_DIR OUT_DIR                 a run's latest checkpoint as a transformers directory

Training and evaluation are `python -m replaylab.train` and `python -m replaylab.evaluate`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields, is_dataclass


def cmd_tiny(args: argparse.Namespace) -> int:
    import time

    from replaylab.models.tiny_spec import TinyWorldConfig
    from replaylab.models.tiny_world import ensure_tiny_world

    t0 = time.time()
    path = ensure_tiny_world(TinyWorldConfig(), progress=not args.quiet)
    report = json.loads((path / "build.json").read_text())
    print(f"tiny world: {path} ({time.time() - t0:.1f}s)")
    from replaylab.evaluation.tiny import tiny8_accuracy

    for role in ("teacher", "student"):
        # Entries built before the build stopped measuring themselves carry it; else measure now (~2 s).
        acc = report.get(f"{role}_tiny8") or tiny8_accuracy(path / role)
        print(f"  {role}: " + "  ".join(f"{k}={v:.2f}" for k, v in acc.items()))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a run's latest checkpoint (single-process .pt or sharded DCP directory) as a plain
    `save_pretrained` directory: `python -m replaylab.evaluate model.name_or_path=OUT_DIR` loads it."""
    from pathlib import Path

    import yaml

    from replaylab.models.loading import resolve_path
    from replaylab.models.tiny_spec import TinyModelSize, TinyWorldConfig
    from replaylab.training.runs import export_checkpoint, latest_checkpoint

    run = Path(args.run_dir)
    target = latest_checkpoint(run)
    if target is None:
        print(f"{run}: no checkpoint (expected {run / 'checkpoints' / 'latest'})", file=sys.stderr)
        return 2
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    tiny = dict(cfg.get("tiny", {}))
    tiny_cfg = TinyWorldConfig(**{**tiny, "teacher": TinyModelSize(**tiny.get("teacher", {}))}) if tiny else None
    base = resolve_path(cfg["model"]["name_or_path"], tiny_cfg, progress=False)
    out = export_checkpoint(target, Path(args.out_dir), base)
    print(f"exported {target} -> {out}")
    return 0


def cmd_config_help(args: argparse.Namespace) -> int:
    import typing

    from replaylab.config import Config
    from replaylab.replay import STRATEGIES

    hints = typing.get_type_hints(Config)
    groups = [args.group] if args.group else [f.name for f in fields(Config)]
    for name in groups:
        if name == "strategy":
            for sname, cls in sorted(STRATEGIES.items()):
                print(f"[strategy={sname}]")
                _print_help(cls.Config, "strategy.")
            continue
        cls = hints.get(name)
        if cls is None:
            print(f"unknown group {name!r}; allowed: {[f.name for f in fields(Config)]}", file=sys.stderr)
            return 2
        if is_dataclass(cls):
            print(f"[{name}]")
            _print_help(cls, f"{name}.")
        elif args.group:  # a top-level key (order, experiment, ...): its own line
            print(f"  {name}: {next(f for f in fields(Config) if f.name == name).metadata.get('help', '')}")
    if not args.group:  # the top-level keys after the groups
        print("[top level]")
        for f in fields(Config):
            if f.name != "strategy" and not is_dataclass(hints.get(f.name)):
                print(f"  {f.name}: {f.metadata.get('help', '')}")
    return 0


def _print_help(cls, prefix: str) -> None:
    import typing

    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        print(f"  {prefix}{f.name}: {f.metadata.get('help', '')}")
        if is_dataclass(hints.get(f.name)):
            _print_help(hints[f.name], f"{prefix}{f.name}.")


def main(argv: list[str] | None = None) -> int:
    from replaylab.cli import grade as cli_grade

    parser = argparse.ArgumentParser(prog="replaylab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    cli_grade.add_parser(sub)
    tiny = sub.add_parser("tiny", help="build (or find in the cache) the tiny world and print its accuracy")
    tiny.add_argument("--quiet", action="store_true")
    tiny.set_defaults(func=cmd_tiny)
    ch = sub.add_parser("config-help", help="list config fields with their help texts")
    ch.add_argument("group", nargs="?")
    ch.set_defaults(func=cmd_config_help)
    ex = sub.add_parser("export", help="a run's latest checkpoint as a transformers (save_pretrained) directory")
    ex.add_argument("run_dir")
    ex.add_argument("out_dir")
    ex.set_defaults(func=cmd_export)
    from replaylab.cli import show
    from replaylab.results import claims_report, figures, table

    table.add_parser(sub)
    claims_report.add_parser(sub)
    show.add_parser(sub)
    figures.add_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
