"""Tiny models built from configs in tmp dirs; nothing is downloaded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tiny_families: the family matrix's checkpoints
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # the backend sizes its CPU threads from it (pytest -n 2: one each)


@pytest.fixture(scope="session", autouse=True)
def _threads() -> None:

    torch.set_num_threads(1)


def make_config(*flags: str):  # type: ignore[no-untyped-def]
    from retrain.validation.load import load_config

    base = ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "4"]
    return load_config(None, [*base, *flags], import_plugins=False).config


@pytest.fixture
def tiny_config():  # type: ignore[no-untyped-def]
    return make_config
