#!/usr/bin/env bash
# Builds the virtual environment of the Tinker-compatible test server (skyrl-tx on CPU JAX)
# outside the repository, once; the Tinker backend's integration tests start it on 127.0.0.1.
#
# The smallest install that runs: skyrl-tx without its dependencies (its `jax` extra pins
# jax[cuda12] and its `peft` pulls torch with CUDA: ~10 GB), then what the API server and the
# JAX engine import, with plain CPU jaxlib. peft is replaced at run time by a stand-in in the
# test support code (tests/txserver), so torch is never installed. ~0.8 GB, seconds from a
# warm cache. Idempotent: an existing environment whose marker matches is kept.
set -euo pipefail

VENV="${RETRAIN_TX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/retrain/txserver-skyrl-tx-0.3.0}"
MARKER="$VENV/.retrain-txserver-1"
UV="${UV:-uv}"

if [ -x "$VENV/bin/python" ] && [ -e "$MARKER" ]; then
    echo "tinker test server environment ready: $VENV"
    exit 0
fi

start=$(date +%s)
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
$UV venv --quiet --python 3.11 "$VENV"
$UV pip install --quiet --python "$VENV/bin/python" --no-deps "skyrl-tx==0.3.0"
$UV pip install --quiet --python "$VENV/bin/python" \
    "tinker==0.38.0" "jax==0.10.2" "jaxlib==0.10.2" "flax==0.12.8" "optax==0.2.8" \
    "transformers==4.57.6" "tokenizers==0.22.2" "safetensors==0.8.0" "numpy==2.4.6" \
    "fastapi==0.165.0" "uvicorn==0.55.0" "sqlmodel==0.0.50" "sqlalchemy[asyncio]==2.1.9" \
    "aiosqlite" "cloudpathlib==0.26.0" "rich" "zstandard==0.25.0"
touch "$MARKER"
echo "tinker test server environment built in $(( $(date +%s) - start )) s: $VENV ($(du -sh "$VENV" | cut -f1))"
