#!/usr/bin/env bash
# Gathers what tests/scripts/gpu_check.sh needs on a GPU machine without a package index into DEST
# (default .gpu, which .git/info/exclude should ignore): DEST/site, the pure-Python packages a CUDA image
# with torch and transformers lacks, copied from this checkout's .venv; DEST/cache/tiny, the tiny world
# (built here first if needed: `replaylab tiny`). Then, on the GPU machine, from the repository root:
#   bash tests/scripts/gpu_check.sh $PWD/.gpu/site $PWD/.gpu/cache
set -euo pipefail
DEST=${1:-.gpu}
VENV=${VENV:-.venv}
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
mkdir -p "$DEST/site/hydra_plugins" "$DEST/cache"
for pkg in hydra omegaconf antlr4 math_verify latex2sympy2_extended; do
  cp -r "$SITE/$pkg" "$DEST/site/"
done
# their metadata (importlib.metadata.version reads it) and the parallel launcher's plugin
cp -r "$SITE"/hydra_core-*.dist-info "$SITE"/omegaconf-*.dist-info "$SITE"/antlr4_python3_runtime-*.dist-info \
  "$SITE"/math_verify-*.dist-info "$SITE"/latex2sympy2_extended-*.dist-info "$SITE"/hydra_joblib_launcher-*.dist-info \
  "$DEST/site/"
cp -r "$SITE/hydra_plugins/hydra_joblib_launcher" "$DEST/site/hydra_plugins/"
find "$DEST/site" -name __pycache__ -prune -exec rm -rf {} +
TINY=$("$VENV/bin/python" -c "from replaylab.models.tiny_world import ensure_tiny_world; print(ensure_tiny_world(progress=False))")
mkdir -p "$DEST/cache/tiny"
cp -r "$TINY" "$DEST/cache/tiny/"
du -sh "$DEST"
