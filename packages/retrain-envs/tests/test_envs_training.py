"""End-to-end: the tiny model trains for a few RL steps through the real `retrain` command
against a verifiers taskset installed from this test tree (single-turn boxed sums) and a real
OpenEnv game server on 127.0.0.1; rewards, per-reward metrics and turn counts reach
metrics.jsonl; the single-turn run resumes after SIGKILL bit-identically; the guess fixture's
own vf.Env (verifiers multi-turn) trains through verifiers' machinery.

Tiers: the single-turn run (built once per session) and the tests that only read it, with the
one-line refusals of an unreachable server and of max_turns, are the fast tier's end-to-end
run of this member; every other run (game servers, resumes, multi-turn) is slow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from servers import game_server

# End-to-end runs through the retrain command on the local backend: with this member alone
# (make test-retrain-envs) neither is installed, and the workspace suite runs these.
pytest.importorskip("retrain.cli", reason="needs retrain-cli (the workspace suite runs these)")
pytest.importorskip("retrain.backends.local", reason="needs retrain-backends-local")

from retrain_fixture_guess.taskset import BREVITY_WEIGHT

from retrain.io.log import read_jsonl
from retrain.training.telemetry import WALL_CLOCK_FIELDS


def write_run(root: Path, environment: str, **training: object) -> Path:
    settings = {"seed": 0, "max_steps": 3, "batch_size": 2, "group_size": 4, "max_tokens": 8, "temperature": 1.0,
                "lr": 1e-2, "save_every": 1, **training}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in settings.items())
    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / 'adapters'}"
[training]
{lines}
[environment]
{environment}
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def retrain(cfg: Path, *args: str, crash: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "RETRAIN_CRASH_AT": crash}
    return subprocess.run([sys.executable, "-m", "retrain.cli", str(cfg), *args], cwd=cfg.parent, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def rl_rows(root: Path) -> list[dict[str, object]]:
    return [r for r in read_jsonl(root / "logs" / "metrics.jsonl") if r.get("phase") != "sft"]


SINGLE = 'provider = "verifiers"\nid = "retrain-fixture-boxed-math"\nrollout_env_workers = 4\nargs = {num_tasks = 16}'


def deterministic(root: Path) -> dict[str, object]:
    return {"metrics": [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in rl_rows(root)],
            "generations": read_jsonl(root / "logs" / "emergence" / "generations.jsonl"),
            "adapter": (root / "adapters" / "final" / "adapter_model.safetensors").read_bytes()}


@pytest.fixture(scope="session")
def single_turn(build_once) -> Path:  # type: ignore[no-untyped-def]
    def train(root: Path) -> None:
        res = retrain(write_run(root, SINGLE))
        assert res.returncode == 0, res.stderr

    return build_once("envs-verifiers-single-turn", train)


def test_verifiers_single_turn_trains_on_the_tasksets_rewards(single_turn: Path) -> None:
    rows = rl_rows(single_turn)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows:
        for key in ("env/reward/correct", "env/reward/has_digit", "env/metric/length", "env/time_share"):
            assert key in r, key
        # the weighted sum verifiers computes is the reward retrain trains on
        expected = float(r["env/reward/correct"]) + 0.5 * float(r["env/reward/has_digit"])
        assert abs(float(r["mean_reward"]) - expected) < 1e-9
    assert any(float(r["env/reward/has_digit"]) > 0 for r in rows)
    assert any(int(r["num_datums"]) > 0 for r in rows), "no step trained"
    gens = read_jsonl(single_turn / "logs" / "emergence" / "generations.jsonl")
    assert gens and "+" in str(gens[0]["prompt"])


@pytest.mark.slow
def test_verifiers_single_turn_resumes_bit_identically(single_turn: Path, tmp_path: Path) -> None:
    cfg = write_run(tmp_path, SINGLE)
    killed = retrain(cfg, crash="after_checkpoint@1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = retrain(cfg, "--resume", str(tmp_path / "logs"))
    assert resumed.returncode == 0, resumed.stderr
    assert deterministic(tmp_path) == deterministic(single_turn)


def openenv_section(url: str, **args: object) -> str:
    base = {"num_examples": 4, "send_token_limited_actions": True, "message_timeout_s": 30, **args}
    table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in base.items())
    return f'provider = "openenv"\nid = "{url}"\nrollout_env_workers = 8\nargs = {{{table}}}'


@pytest.mark.slow
def test_openenv_multi_turn_trains_and_logs_turns(tmp_path: Path) -> None:
    with game_server() as url:
        res = retrain(write_run(tmp_path, openenv_section(url), max_tokens=6))
    assert res.returncode == 0, res.stderr
    rows = rl_rows(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert r["env/episodes"] == 8.0 and r["env/dropped_episodes"] == 0.0
        assert 1.0 <= float(r["env/turns_mean"]) <= 3.0
        assert float(r["env/observation_tokens"]) > 0
        assert 0.0 < float(r["env/time_share"]) <= 1.0
    assert max(float(r["env/turns_max"]) for r in rows) >= 2.0
    assert any(float(r["mean_reward"]) > 0 for r in rows)
    assert any(int(r["num_datums"]) > 0 for r in rows), "no step trained"
    gens = read_jsonl(tmp_path / "logs" / "emergence" / "generations.jsonl")
    assert any("[user]" in str(g["completion"]) for g in gens), "the generations log shows no transcript"


@pytest.mark.slow
def test_openenv_with_tl_grpo_and_echo(tmp_path: Path) -> None:
    with game_server() as url:
        cfg = write_run(tmp_path, openenv_section(url), max_steps=2, max_tokens=6, save_every=1, tl_grpo=True,
                        tl_grpo_branch_mode="llm", tl_grpo_branch_size=2, tl_grpo_lookahead_steps=0)
        cfg.write_text(cfg.read_text() + "[echo]\nenabled = true\nweight = 0.1\nentropy_floor = 0.0\n")
        res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    rows = rl_rows(tmp_path)
    assert all(str(r["condition"]).endswith("+echo") for r in rows)
    assert all(float(r["tl_grpo/branch_probes"]) > 0 for r in rows)
    assert any(float(r.get("echo/tokens", 0)) > 0 for r in rows)
    state = json.loads((tmp_path / "logs" / "trainer_state.json").read_text())
    assert state["environment"]["tl_grpo_ema"] == rows[-1]["tl_grpo/ema"]


@pytest.mark.slow
def test_openenv_with_tl_grpo_samples_two_batches_ahead(tmp_path: Path) -> None:
    """max_async_level = 2: the episodes (and TL-GRPO's branches) sample from their batch's
    version, and each checkpoint saves TL-GRPO's state as it was after the batches trained,
    not after those already collected ahead."""
    with game_server() as url:
        cfg = write_run(tmp_path, openenv_section(url), max_steps=4, max_tokens=6, save_every=1, tl_grpo=True,
                        tl_grpo_branch_mode="llm", tl_grpo_branch_size=2, tl_grpo_lookahead_steps=0,
                        max_async_level=2)
        res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    rows = rl_rows(tmp_path)
    assert [r["async/policy_lag"] for r in rows] == [0, 1, 2, 2]
    assert all(float(r["tl_grpo/branch_probes"]) > 0 for r in rows)
    for step, row in enumerate(rows):
        saved = json.loads((tmp_path / "adapters" / f"checkpoint_step_{step + 1}" / "trainer_state.json").read_text())
        assert saved["environment"]["tl_grpo_ema"] == row["tl_grpo/ema"], step


@pytest.mark.slow
def test_openenv_survives_a_server_that_dies_and_comes_back(tmp_path: Path) -> None:
    with game_server(supervise=True, GUESS_DIE_AFTER="5", GUESS_DIED_FLAG=str(tmp_path / "died")) as url:
        # a restart imports openenv-core again: seconds on a loaded machine, hence the patience
        res = retrain(write_run(tmp_path, openenv_section(url, retries=7, retry_backoff_s=1.0), max_steps=2,
                                max_tokens=6))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "died").exists()
    rows = rl_rows(tmp_path)
    assert sum(float(r["env/retries"]) for r in rows) > 0
    assert all(r["env/episodes"] + r["env/dropped_episodes"] == 8.0 for r in rows)


@pytest.mark.slow
def test_openenv_times_out_a_slow_server_and_retries(tmp_path: Path) -> None:
    with game_server(GUESS_SLOW_EVERY="3", GUESS_SLOW_S="5") as url:
        res = retrain(write_run(tmp_path, openenv_section(url, message_timeout_s=1, retry_backoff_s=0.1),
                                max_steps=1, max_tokens=6))
    assert res.returncode == 0, res.stderr
    (row,) = rl_rows(tmp_path)
    assert row["env/retries"] > 0


@pytest.mark.slow
def test_openenv_server_that_stays_down_stops_the_run_with_one_line(tmp_path: Path) -> None:
    with game_server(GUESS_DIE_AFTER="3") as url:
        res = retrain(write_run(tmp_path, openenv_section(url, retries=1, retry_backoff_s=0.1, connect_timeout_s=2),
                                max_steps=2, max_tokens=6))
    assert res.returncode == 2, res.stderr
    assert url in res.stderr and "Traceback" not in res.stderr


def test_unreachable_openenv_server_is_one_clear_error(tmp_path: Path) -> None:
    from servers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    res = retrain(write_run(tmp_path, openenv_section(url, connect_timeout_s=2)))
    assert res.returncode == 2
    assert f"OpenEnv server {url} is unreachable" in res.stderr and "Traceback" not in res.stderr


MULTI = ('provider = "verifiers"\nid = "retrain-fixture-guess"\nmax_turns = 3\nrollout_env_workers = 6\n'
         'args = {num_tasks = 8}')


@pytest.mark.slow
def test_verifiers_multi_turn_trains_through_the_envs_own_run(tmp_path: Path) -> None:
    """The guess fixture's own vf.Env plays every episode (its harness program in a subprocess,
    the policy behind retrain's token-in/token-out endpoint); the datums hold each turn's
    sampled tokens with the env's messages between them as observations."""
    res = retrain(write_run(tmp_path, MULTI, max_steps=2, group_size=3, max_tokens=3))
    assert res.returncode == 0, res.stderr
    rows = rl_rows(tmp_path)
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["env/episodes"] + r["env/dropped_episodes"] == 6.0 and r["env/dropped_episodes"] == 0.0
        # the Env asks up to max_guesses = 3 times; max_turns = 3 agrees
        assert float(r["env/turns_mean"]) >= 1.0 and float(r["env/turns_total"]) >= 6.0
        assert float(r["env/observation_tokens"]) > 0
        assert 1.0 <= float(r["env/metric/turns"]) <= 3.0  # the task's own @vf.metric
        # the trace's reward is verifiers' weighted sum of what the Env recorded
        shaped = float(r["env/reward/hit"]) + BREVITY_WEIGHT * float(r["env/reward/brevity"])
        assert abs(float(r["mean_reward"]) - shaped) < 1e-9
        assert r["env/unmatched_turns"] == 0.0, "a turn's tokens differ from what the endpoint served"
        assert r["env/policy_requests"] == r["env/turns_total"]
        assert 0.0 < float(r["env/time_share"]) <= 1.0
    assert any(int(r["num_datums"]) > 0 for r in rows), "no step trained"
    gens = read_jsonl(tmp_path / "logs" / "emergence" / "generations.jsonl")
    assert any("[user] higher" in str(g["completion"]) or "[user] lower" in str(g["completion"]) for g in gens)


def test_verifiers_single_turn_taskset_refuses_max_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The command in this process: the refusal is the subject, not the process."""
    from retrain.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main([str(write_run(tmp_path, SINGLE + "\nmax_turns = 2"))])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "[environment] max_turns" in err and "single-turn" in err and "Traceback" not in err
