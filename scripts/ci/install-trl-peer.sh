#!/usr/bin/env bash
# Makes (or finds in its cache) the separate TRL environment that tests/test_trl_parity.py
# compares the local backend's loss against (scripts/peer/trl_env.py). CI reaches the package
# index, so a failure here fails the run instead of letting the parity test skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
${UV:-uv} run --locked python scripts/peer/trl_env.py
