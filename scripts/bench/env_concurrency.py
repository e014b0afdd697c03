"""OpenEnv episodes run concurrently: environment wall time of one step (JSON).

The test game (packages/retrain-envs/tests/fixtures/openenv_games/guess_server.py, served by
uvicorn on 127.0.0.1) sleeps 100 ms in every step and never ends an episode early here (its
target is out of the policy's reach: every episode takes its 3 attempts). One RL step's
rollouts are collected with the tiny model sampling in-process: 4 prompts x 4 episodes = 16
episodes x 3 turns = 48 environment steps. With `rollout_env_workers` = 16 the steps of a
turn overlap, so the environment's wall time is about 3 x 100 ms, not 48 x 100 ms; with 1
worker it is sequential. Printed per setting: the environment wall time (some call in
flight), the summed call time, the step's wall time and the environment's share of it.

    uv run python scripts/bench/env_concurrency.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packages" / "retrain-envs" / "tests"))

STEP_SLEEP_S = 0.1
EPISODES = (4, 4)  # prompts, episodes per prompt


def measure(url: str, workers: int) -> dict[str, float]:
    from retrain.backends.create import create_backend
    from retrain.environments.create import create_environment
    from retrain.types import SamplingParams
    from retrain.validation.load import load_config

    flags = ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "4",
             "--environment-provider", "openenv", "--environment-id", url,
             "--environment-rollout-env-workers", str(workers), "--environment-rollout-buffer-size", "16",
             "--environment-args", json.dumps({"num_examples": EPISODES[0], "send_token_limited_actions": True})]
    config = load_config(None, flags, import_plugins=False).config
    env = create_environment(config)
    backend = create_backend(config)
    env.open(backend)
    batch = [(ex, env.encode(ex, backend.tokenizer)) for ex in env.examples()]
    t0 = time.perf_counter()
    out = env.collect(backend, batch, group_size=EPISODES[1], sampling=SamplingParams(max_tokens=4, temperature=1.0))
    step_s = time.perf_counter() - t0
    m = out.env_metrics
    return {"rollout_env_workers": workers, "episodes": m["env/episodes"], "env_steps": m["env/turns_total"],
            "env_wall_s": round(m["env/env_wall_s"], 3), "env_call_s": round(m["env/env_s"], 3),
            "sequential_estimate_s": round(m["env/turns_total"] * STEP_SLEEP_S, 3),
            "step_s": round(step_s, 3), "sample_s": round(out.sample_time_s, 3),
            "env_share": round(m["env/env_wall_s"] / step_s, 3)}


def main() -> None:
    from servers import game_server

    # targets 1..9 and a policy that never names one: no episode ends before its 3 attempts
    with game_server(GUESS_STEP_SLEEP_S=str(STEP_SLEEP_S), GUESS_ATTEMPTS="3", GUESS_UNREACHABLE="1") as url:
        rows = [measure(url, 16), measure(url, 1)]
    print(json.dumps({"step_sleep_s": STEP_SLEEP_S, "turns_per_episode": 3, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
