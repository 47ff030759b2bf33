# replaylab: `make run` installs and trains on the embedded tiny world; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build on disk here; on a GPU machine use e.g. TORCH_SPEC='torch==2.14.0' (what vllm pins).
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev
# test worker processes (pytest-xdist); each test's own runs use one torch thread, so one per core
TEST_JOBS ?= 2
TRAIN := $(PY) -m replaylab.train
SWEEP := $(TRAIN) -m

# The table targets are pattern rules (make skips implicit rules for .PHONY targets, so they are not
# listed there): tiny-table-ropd, tiny-table-prompt-replay, tiny-table-repo, tiny-table-popo,
# tiny-table-rlep, tiny-table-grpo-replay (Prompt Replay, RLEP, RePO, POPO and dynamic sampling beside
# one shared current arm),
# tiny-table-budget-axes, tiny-table-reopd, tiny-table-prefixrl, tiny-table-hdl,
# tiny-table-fifo (compute-matched), tiny-table-fopd, tiny-table-depo, and the same without `tiny-`
# at full scale.
.PHONY: install run test tiny bench clean notebooks tiny-table-ropd tiny-table-budget-axes table-budget-axes tiny-claims FORCE

install: $(VENV)/.installed

# What the install was made with: another TORCH_SPEC or EXTRAS re-runs it (the stamp alone would say
# "nothing to be done" after an earlier install). Another PYTHON needs a fresh venv: remove $(VENV).
INSTALL_SPEC := $(TORCH_SPEC) [$(EXTRAS)]
$(VENV)/.install-spec: FORCE
	@mkdir -p $(VENV)
	@echo '$(INSTALL_SPEC)' | cmp -s - $@ || echo '$(INSTALL_SPEC)' > $@
FORCE:

$(VENV)/.installed: pyproject.toml $(VENV)/.install-spec
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: a bare range would pull a multi-GB CUDA build on a CPU machine.
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

run: install  ## the main job: OPD on the tiny world (builds the tiny world on first use); ARGS: overrides
	$(TRAIN) $(ARGS)

test: install  ## ARGS: pytest arguments, e.g. ARGS='tests/test_paired.py -x'; TEST_JOBS: worker processes (pytest-xdist)
	$(PY) -m pytest -q -n $(TEST_JOBS) $(ARGS)

tiny: install  ## build (or find in the cache) the tiny world and print its tiny8 accuracy
	$(VENV)/bin/replaylab tiny

# Timed benchmarks (benchmarks/*.py say what each measures). The A/B ones alternate each side in its own
# process, BENCH_PAIRS pairs; those built on benchmarks/alternate.py (all but bench_checkpoint, which prints
# its pairs only) save every pair under BENCH_OUT. Needs the bench extra (TRL, datasets).
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
# Where the table targets' sweeps write (output_root) and their table step reads: RUNS=DIR moves both.
# ARGS='output_root=...' or 'experiment=...' would move the runs alone, so those targets refuse it.
RUNS ?= runs
define runs_stay_put
	@case " $(ARGS) " in *" output_root="*|*" experiment="*) echo "ARGS: output_root= / experiment= would move \
	the runs away from where this target's table step reads them ($(RUNS)/<experiment>): set RUNS=DIR instead" >&2; \
	exit 2;; esac
endef

tiny-table-budget-axes: install  ## queries per iteration x resampling period, current vs initial
	$(runs_stay_put)
	$(SWEEP) +sweep=tiny_budget_axes $(TINY_LAUNCHER) output_root=$(RUNS) $(ARGS)
	$(VENV)/bin/replaylab table $(RUNS)/tiny_budget_axes $(AXES_TABLE)

table-budget-axes: install
	$(runs_stay_put)
	$(SWEEP) +sweep=budget_axes output_root=$(RUNS) $(ARGS)
	$(VENV)/bin/replaylab table $(RUNS)/budget_axes $(AXES_TABLE)

# The claims report: every tiny sweep a seed-paper claim reads, then `replaylab claims` over their runs
# (reports/tiny_claims.md and one figure per claim beside it). CLAIM_SWEEPS narrows it, e.g.
# make tiny-claims CLAIM_SWEEPS='tiny_grpo_replay'; the report reads only those sweeps' runs (tiny_ropd_long
# writes into tiny_ropd's experiment), and the other claims are reported as not run. With RUNS=DIR the
# report goes to DIR/reports/ beside those runs, so a trial sweep never overwrites the checkout's report;
# CLAIMS_OUT=FILE names it.
CLAIM_SWEEPS ?= tiny_ropd tiny_ropd_long tiny_budget_axes tiny_grpo_replay
CLAIMS_OUT ?= $(if $(filter runs,$(RUNS)),reports,$(RUNS)/reports)/tiny_claims.md
comma := ,
tiny-claims: install
	$(runs_stay_put)
	set -e; for s in $(CLAIM_SWEEPS); do $(SWEEP) +sweep=$$s $(TINY_LAUNCHER) output_root=$(RUNS) $(ARGS); done
	$(VENV)/bin/replaylab claims $(RUNS) --sweeps $(subst $() ,$(comma),$(sort $(patsubst %_long,%,$(CLAIM_SWEEPS)))) \
		--out $(CLAIMS_OUT)

# The R-OPD table: five orders at both budgets, then eight more at the long one (same experiment).
tiny-table-ropd: install
	$(runs_stay_put)
	$(SWEEP) +sweep=tiny_ropd $(TINY_LAUNCHER) output_root=$(RUNS) $(ARGS)
	$(SWEEP) +sweep=tiny_ropd_long $(TINY_LAUNCHER) output_root=$(RUNS) $(ARGS)
	$(VENV)/bin/replaylab table $(RUNS)/tiny_ropd

tiny-table-%: install
	$(runs_stay_put)
	$(SWEEP) +sweep=tiny_$(subst -,_,$*) $(TINY_LAUNCHER) output_root=$(RUNS) $(ARGS)
	$(VENV)/bin/replaylab table $(RUNS)/tiny_$(subst -,_,$*)

# --- paper tables at full scale (GPU cluster: add launcher=slurm) -------------------------------
table-%: install
	$(runs_stay_put)
	$(SWEEP) +sweep=$(subst -,_,$*) output_root=$(RUNS) $(ARGS)
	$(VENV)/bin/replaylab table $(RUNS)/$(subst -,_,$*)

clean:
	rm -rf runs outputs multirun
