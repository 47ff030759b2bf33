#!/usr/bin/env bash
# The CUDA checks, as one script for a machine with an NVIDIA GPU and a CUDA torch but no package index
# (the device tool's machines): the gpu-marked tests that need no vllm, then a short tiny-world OPD and
# GRPO run and the generation benchmark on CUDA. Logs and results go to $OUT (default /tmp/gpu_check).
#
#   tests/scripts/gpu_check.sh [SITE] [CACHE]
#
# SITE: a folder of the pure-Python packages the machine lacks (hydra-core, omegaconf, antlr4 4.9.3,
# math-verify, latex2sympy2_extended), copied from a working install; CACHE: a replaylab cache holding
# the tiny world (REPLAYLAB_CACHE), so the runs need not build it. Each step has its own time limit,
# so one that hangs leaves the rest their time.
set -u
SITE=${1:-}
CACHE=${2:-$HOME/.cache/replaylab}
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${SITE:+:$SITE}" PYTHONUNBUFFERED=1 WANDB_MODE=disabled REPLAYLAB_CACHE="$CACHE"
PY=${PYTHON:-python3}

step() {  # step NAME SECONDS CMD...: run CMD under a time limit, log to $OUT/NAME.log, print its tail
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc, $((SECONDS - t0)) s (limit $limit s)"
  tail -n "${TAIL:-15}" "$OUT/$name.log"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers',
transformers.__version__, 'gpu', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"

step pytest_gpu 200 $PY -m pytest -q -s -m gpu -p no:cacheprovider tests/test_cuda.py tests/test_vllm_gpu.py \
  tests/test_teacher_server.py
RUN=(wandb.enabled=false progress=false trainer.device=${DEVICE:-cuda} trainer.checkpoint_every=0 output_root=/tmp/gpu_check_runs)
step opd_cuda 130 $PY -m replaylab.train trainer=opd budget.max_updates=200 trainer.eval_every=100 "${RUN[@]}"
step grpo_cuda 110 $PY -m replaylab.train trainer=grpo teacher=none budget.max_updates=100 trainer.eval_every=50 "${RUN[@]}"
step generation_cuda 60 $PY benchmarks/bench_generation.py --device ${DEVICE:-cuda} --pairs 2 --mode fixed --out "$OUT/generation.json"
# every run's rows, for the note
find /tmp/gpu_check_runs -name rows.jsonl | while read -r f; do cp "$f" "$OUT/$(basename "$(dirname "$f")").rows.jsonl"; done
