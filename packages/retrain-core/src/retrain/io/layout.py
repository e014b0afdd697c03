"""The names of the files in a run directory and a campaign directory: the one place every
writer (the trainer) and every reader (status, diff, resume-check, the exporter) takes them
from. The names are the reference implementation's, so either side reads the other's runs."""

from __future__ import annotations

METRICS = "metrics.jsonl"
STEPS = "emergence/steps.jsonl"
GENERATIONS = "emergence/generations.jsonl"
EMERGENCE_DIR = "emergence"
RUN_META = "run_meta.json"
PID = "run.pid"
TRAINER_STATE = "trainer_state.json"
#: the latest checkpoint's path and a newline; written beside trainer_state.json
LATEST_SAMPLER = "latest_sampler_path.txt"
#: a campaign directory's index of its runs
MANIFEST = "manifest.json"

#: checkpoint directory names under `[backend] adapter_path`
FINAL = "final"
#: under `[backend] adapter_path`: the adapter an inference server samples from, replaced
#: atomically after every optimizer step
LIVE_ADAPTER = "_live_adapter"
#: inside a checkpoint: the adapter the inference server was sampling from at that point
SAMPLER_ADAPTER = "sampler_adapter"


def checkpoint_name(step: int, phase: str = "") -> str:
    """`checkpoint_step_N` after RL step N-1, `warmup_step_N` after warmup step N-1."""
    return f"warmup_step_{step + 1}" if phase == "warmup" else f"checkpoint_step_{step + 1}"
