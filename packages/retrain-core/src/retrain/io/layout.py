"""The names of the files in a run directory and a campaign directory: the one place every
writer (the trainer) and every reader (status, diff, resume-check, the exporter) takes them
from. The names are the reference implementation's, so either side reads the other's runs."""

from __future__ import annotations

METRICS = "metrics.jsonl"
STEPS = "emergence/steps.jsonl"
GENERATIONS = "emergence/generations.jsonl"
EMERGENCE_DIR = "emergence"
#: one row per held-out evaluation (`retrain.evaluation.row`)
EVAL = "eval.jsonl"
#: per-problem results of each evaluation: eval/step_N.jsonl
EVAL_DIR = "eval"
RUN_META = "run_meta.json"
#: the full traceback of the first reward failure of each kind (retrain.training.reward_faults)
REWARD_ERRORS = "reward_errors.log"
#: the LLM judge's verdicts, one JSON line each, kept across a resume (retrain.rewards.judge.cache)
JUDGE_CACHE = "judge_cache.jsonl"
#: a reward model's scores, one JSON line each, kept across a resume (retrain.rewards.model.scorer)
REWARD_MODEL_CACHE = "reward_model_cache.jsonl"
PID = "run.pid"
TRAINER_STATE = "trainer_state.json"
#: the latest checkpoint's path and a newline; written beside trainer_state.json
LATEST_SAMPLER = "latest_sampler_path.txt"
#: a campaign directory's index of its runs
CAMPAIGN_MANIFEST = "manifest.json"
#: in a campaign directory: the results per condition, written when the campaign ends
CAMPAIGN_SUMMARY = "campaign_summary.json"
#: in a campaign directory: each run's resolved config (`configs/<run_name>.toml`)
CAMPAIGN_CONFIGS = "configs"
#: in a campaign directory: the run directories (`runs/<run_name>/`)
CAMPAIGN_RUNS = "runs"
#: TTT-Discover's final archive (retrain.training.trainers.discover)
DISCOVER_ARCHIVE = "discover_archive.json"
#: `trainer = "command"`: every config field, flat and unredacted, for the external program
COMMAND_CONFIG = "retrain_config.json"
#: `trainer = "optimizer_replay"`: what the replayed step was compared with
REPLAY_MANIFEST = "optimizer_batch_replay_manifest.json"
#: the audit files of a standalone SFT run (retrain.training.sft.audit)
SFT_RESOLVED_CONFIG = "resolved_config.json"
SFT_DATA_SNAPSHOT = "sft_data.snapshot.jsonl"
SFT_RECOVERABILITY = "sft_data_recoverability.json"
SFT_MANIFEST = "sft_manifest.json"
#: the trackers' folders in a run directory (retrain.training.trackers): W&B's own (`dir=`),
#: TensorBoard's event files, MLflow's default file store
WANDB_DIR = "wandb"
TENSORBOARD_DIR = "tensorboard"
MLFLOW_DIR = "mlruns"
#: the SFT manifest's copy inside the final weights' folder
SFT_FINAL_MANIFEST = "retrain_sft_manifest.json"
#: in a run directory of a campaign's worker process: its captured output
STDOUT = "stdout.log"
STDERR = "stderr.log"
#: beside a tree file: the experiment tree's progress
TREE_STATE = "tree_state.json"
#: in a benchmark suite directory
BENCHMARK_META = "benchmark_meta.json"
BENCHMARK_SUMMARY = "benchmark_summary.json"

#: checkpoint directory names under `[backend] adapter_path`
FINAL = "final"
#: under `[backend] adapter_path`: which run's log directory owns the folder (retrain.training.rundir)
ADAPTER_OWNER = "run_owner.json"
#: inside a checkpoint: each file's size and sha256 (retrain.training.integrity)
CHECKPOINT_DIGESTS = "digests.json"
#: under `[backend] adapter_path`: the latest trained adapter, which an inference server samples
#: between steps (evaluation), replaced atomically when it changed
LIVE_ADAPTER = "_live_adapter"
#: under `[backend] adapter_path`: one folder per published version an inference server holds
#: (`policy-v<N>`, retrain.backends.protocol.VersionedSampler)
PUBLISHED_ADAPTERS = "_published"
#: inside a checkpoint: the published versions that batches sampled ahead draw from
SAMPLER_VERSIONS = "sampler_versions.safetensors"


def eval_problems_name(step: int) -> str:
    """The per-problem file of the evaluation after `step` RL steps."""
    return f"{EVAL_DIR}/step_{step}.jsonl"


def eval_problems_step(name: str) -> int | None:
    """N of a per-problem file name `step_N.jsonl`, or None."""
    stem = name.removeprefix("step_").removesuffix(".jsonl")
    return int(stem) if name.startswith("step_") and name.endswith(".jsonl") and stem.isdigit() else None


def checkpoint_name(step: int, phase: str = "") -> str:
    """`checkpoint_step_N` after RL step N-1, `warmup_step_N` after warmup step N-1."""
    return f"warmup_step_{step + 1}" if phase == "warmup" else f"checkpoint_step_{step + 1}"
