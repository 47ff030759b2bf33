# replaylab: `make run` installs and trains on the embedded tiny world; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build on disk here; on a GPU machine use e.g. TORCH_SPEC='torch==2.14.0' (what vllm pins).
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
TRAIN := $(PY) -m replaylab.train
SWEEP := $(TRAIN) -m

# The table targets are pattern rules (make skips implicit rules for .PHONY targets, so they are not
# listed there): tiny-table-ropd, tiny-table-prompt-replay, tiny-table-repo, tiny-table-popo,
# tiny-table-rlep, tiny-table-grpo-replay (Prompt Replay, RLEP, RePO, POPO and dynamic sampling beside
# one shared current arm),
# tiny-table-budget-axes, tiny-table-reopd, tiny-table-prefixrl, tiny-table-hdl,
# tiny-table-fifo (compute-matched), tiny-table-fopd, tiny-table-depo, and the same without `tiny-`
# at full scale.
.PHONY: install run test tiny bench clean notebooks tiny-table-ropd tiny-table-budget-axes table-budget-axes tiny-claims

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: a bare range would pull a multi-GB CUDA build on a CPU machine.
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

run: install  ## the main job: OPD on the tiny world (builds the tiny world on first use)
	$(TRAIN)

test: install
	$(PY) -m pytest -q

tiny: install  ## build (or find in the cache) the tiny world and print its tiny8 accuracy
	$(VENV)/bin/replaylab tiny

# Timed benchmarks (benchmarks/*.py say what each measures). The A/B ones alternate each side in its own
# process, BENCH_PAIRS pairs, and save every pair under BENCH_OUT. Needs the bench extra (TRL, datasets).
BENCH_PAIRS ?= 5
BENCH_OUT ?= runs/bench
bench: $(VENV)/.installed-bench
	mkdir -p $(BENCH_OUT)
	$(PY) benchmarks/bench_grading.py
	$(PY) benchmarks/bench_replay_overhead.py
	$(PY) benchmarks/bench_checkpoint.py --pairs $(BENCH_PAIRS)
	$(PY) benchmarks/bench_generation.py --pairs $(BENCH_PAIRS) --out $(BENCH_OUT)/generation.json
	$(PY) benchmarks/bench_trl_grpo.py --pairs $(BENCH_PAIRS) --out $(BENCH_OUT)/trl_grpo.json
	$(PY) benchmarks/bench_trl_opd.py --pairs $(BENCH_PAIRS) --out $(BENCH_OUT)/trl_opd.json
	$(PY) benchmarks/bench_micro_batch.py --pairs $(BENCH_PAIRS) --out $(BENCH_OUT)/micro_batch.json
	$(PY) benchmarks/bench_lean_forward.py --pairs $(BENCH_PAIRS) --out $(BENCH_OUT)/lean_forward.json
	$(PY) benchmarks/bench_matmul_kernel.py --recipe all --pairs $(BENCH_PAIRS) --out $(BENCH_OUT)/matmul_kernel.json

# The install plus the bench extra (what `make bench` needs; `make install` stays without it).
$(VENV)/.installed-bench: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet -e ".[$(EXTRAS),bench]"
	touch $@

notebooks: install
	$(PY) analysis/run_notebooks.py runs/tiny_ropd

AXES_TABLE := --by strategy,prompts_per_iteration,samples_per_prompt,resample_period --columns metric

# --- paper tables on the tiny world (CPU) -------------------------------------------------------
# Tiny tables run their cells side by side (launcher=parallel: 2 at a time, 1 thread each); ARGS
# reach the sweep as at full scale, e.g. make tiny-table-ropd ARGS='hydra.launcher.n_jobs=4 trainer.threads=2'.
TINY_LAUNCHER ?= launcher=parallel

tiny-table-budget-axes: install  ## queries per iteration x resampling period, current vs initial
	$(SWEEP) +sweep=tiny_budget_axes $(TINY_LAUNCHER) $(ARGS)
	$(VENV)/bin/replaylab table runs/tiny_budget_axes $(AXES_TABLE)

table-budget-axes: install
	$(SWEEP) +sweep=budget_axes $(ARGS)
	$(VENV)/bin/replaylab table runs/budget_axes $(AXES_TABLE)

# The claims report: every tiny sweep a seed-paper claim reads, then `replaylab claims` over their runs
# (reports/tiny_claims.md and one figure per claim beside it). CLAIM_SWEEPS narrows it, e.g.
# make tiny-claims CLAIM_SWEEPS='tiny_grpo_replay'; claims of sweeps not run are reported as not run.
CLAIM_SWEEPS ?= tiny_ropd tiny_ropd_long tiny_budget_axes tiny_grpo_replay
tiny-claims: install
	set -e; for s in $(CLAIM_SWEEPS); do $(SWEEP) +sweep=$$s $(TINY_LAUNCHER) $(ARGS); done
	$(VENV)/bin/replaylab claims runs --out reports/tiny_claims.md

# The R-OPD table: five orders at both budgets, then eight more at the long one (same experiment).
tiny-table-ropd: install
	$(SWEEP) +sweep=tiny_ropd $(TINY_LAUNCHER) $(ARGS)
	$(SWEEP) +sweep=tiny_ropd_long $(TINY_LAUNCHER) $(ARGS)
	$(VENV)/bin/replaylab table runs/tiny_ropd

tiny-table-%: install
	$(SWEEP) +sweep=tiny_$(subst -,_,$*) $(TINY_LAUNCHER) $(ARGS)
	$(VENV)/bin/replaylab table runs/tiny_$(subst -,_,$*)

# --- paper tables at full scale (GPU cluster: add launcher=slurm) -------------------------------
table-%: install
	$(SWEEP) +sweep=$(subst -,_,$*) $(ARGS)
	$(VENV)/bin/replaylab table runs/$(subst -,_,$*)

clean:
	rm -rf runs outputs multirun
