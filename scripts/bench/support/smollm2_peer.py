"""What the SmolLM2-beside-TRL benchmarks need before they start: the packaged SmolLM2-135M
converted to a transformers folder, and the TRL peer environment's interpreter. Either missing
prints the benchmark's one JSON object, `{"skipped": why}`, and gives None."""

from __future__ import annotations

import json
from pathlib import Path

import trl_env  # scripts/peer, which each caller puts on sys.path


def smollm2_beside_trl() -> tuple[Path, Path] | None:
    """(the converted SmolLM2 folder, the TRL environment's python), or None after saying why."""
    from retrain.models.gguf import converted, gguf_source
    from retrain.models.unavailable import ModelUnavailable

    try:
        source = gguf_source("smollm2-135m-instruct")
    except ModelUnavailable as exc:
        print(json.dumps({"skipped": str(exc)}))
        return None
    try:
        python = trl_env.ensure()
    except trl_env.PeerUnavailable as exc:
        print(json.dumps({"skipped": f"no TRL environment: {exc}"}))
        return None
    assert source is not None
    return Path(converted(source)), Path(python)
