"""Workspace-wide test settings: nothing reaches a hub, and torch uses one thread per worker
(pytest-xdist runs two workers on two cores)."""

import os

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
    os.environ[_name] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("OMP_NUM_THREADS", "1")
