"""verifiers multi-turn episodes: where one step's time goes (JSON).

One RL step's rollouts of the guess fixture's own vf.Env (packages/retrain-envs/tests/
fixtures/guess; 3 guesses, the Env answers "higher"/"lower"), played by verifiers with the
seat's harness program in a subprocess and the tiny model sampling in-process behind retrain's
policy endpoint: 2 tasks x 4 episodes, `max_tokens` 3. Printed per `rollout_env_workers`: the
step's wall time, the policy's sampling time, the episodes' wall time less sampling (the
harness processes and verifiers' own work), model requests and the backend calls they were
batched into. A warm-up step runs first (the harness's uv environment is built once).

    uv run python scripts/bench/verifiers_multi_turn.py
"""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TASKS, EPISODES = 2, 4


def main() -> None:
    from retrain.backends.create import create_backend
    from retrain.environments.create import create_environment
    from retrain.types import SamplingParams
    from retrain.validation.load import load_config

    rows = []
    for workers in (8, 1, 8):
        flags = ["--model", "tiny", "--devices", "cpu", "--seed", "0", "--lora-rank", "4",
                 "--environment-provider", "verifiers", "--environment-id", "retrain-fixture-guess",
                 "--environment-max-turns", "3", "--environment-rollout-env-workers", str(workers),
                 "--environment-args", json.dumps({"num_tasks": TASKS})]
        config = load_config(None, flags, import_plugins=False).config
        env = create_environment(config)
        backend = create_backend(config)
        env.open(backend)
        try:
            batch = [(ex, env.encode(ex, backend.tokenizer)) for ex in env.examples()]
            sampling = SamplingParams(max_tokens=3, temperature=1.0)
            t0 = time.perf_counter()
            out = env.collect(backend, batch, group_size=EPISODES, sampling=sampling)
            step_s = time.perf_counter() - t0
        finally:
            env.close()
        m = out.env_metrics
        rows.append({"rollout_env_workers": workers, "episodes": m["env/episodes"], "turns": m["env/turns_total"],
                     "step_s": round(step_s, 3), "sample_s": round(out.sample_time_s, 3),
                     "env_wall_s": round(m["env/env_wall_s"], 3),
                     "per_episode_s": round(m["env/env_s"] / max(m["env/episodes"], 1.0), 3),
                     "policy_requests": m["env/policy_requests"], "policy_batches": m["env/policy_batches"],
                     "env_share": round(m["env/env_wall_s"] / step_s, 3)})
    print(json.dumps({"tasks": TASKS, "episodes_per_task": EPISODES, "max_tokens": 3, "warmup": rows[0],
                      "runs": rows[1:]}, indent=2))


if __name__ == "__main__":
    main()
