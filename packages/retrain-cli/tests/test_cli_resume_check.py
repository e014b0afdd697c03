"""`retrain resume-check LOGDIR [--config PATH]`: with a config, the checks use what the resumed
run will use (its max_steps, its log_dir); a config that does not load is exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from retrain.training.integrity import seal
from retrain.training.state import TrainerState, write_state


def saved_run(tmp_path: Path, step: int = 4, max_steps: int = 10) -> Path:
    logs = tmp_path / "logs"
    ckpt = tmp_path / "adapters" / f"checkpoint_step_{step + 1}"
    ckpt.mkdir(parents=True)
    for name in ("checkpoint.json", "optimizer.pt", "rng.pt"):
        (ckpt / name).write_text("x")
    (ckpt / "adapter_model.safetensors").write_text("x")
    seal(ckpt)  # its digests, as a checkpoint is written
    logs.mkdir()
    write_state(logs, TrainerState(step=step, checkpoint_name=ckpt.name, checkpoint_path=str(ckpt)))
    (logs / "run_meta.json").write_text(json.dumps({"config": {"max_steps": max_steps}}))
    return logs


def config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_without_config_uses_the_run_meta_max_steps(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    logs = saved_run(tmp_path)
    res = cli("resume-check", str(logs), "--json")
    assert res.code == 0, res.stdout
    assert json.loads(res.stdout)["max_steps"] == 10


def test_config_max_steps_decides(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    logs = saved_run(tmp_path)
    cfg = config(tmp_path, f"[training]\nmax_steps = 5\n[logging]\nlog_dir = '{logs}'\n")
    res = cli("resume-check", str(logs), "--config", str(cfg), "--json")
    assert res.code == 1
    data = json.loads(res.stdout)
    assert data["max_steps"] == 5 and data["config"] == str(cfg)
    assert [i["code"] for i in data["issues"]] == ["resume_beyond_max_steps"]
    res = cli("resume-check", str(logs), f"--config={cfg}", "--max-steps", "20", "--json")
    assert res.code == 0 and json.loads(res.stdout)["max_steps"] == 20


def test_config_log_dir_holding_another_run(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    logs = saved_run(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.jsonl").write_text('{"step": 0}\n')
    cfg = config(tmp_path, f"[training]\nmax_steps = 50\n[logging]\nlog_dir = '{other}'\n")
    res = cli("resume-check", str(logs), "--config", str(cfg))
    assert res.code == 1 and "resume_target_holds_run" in res.stdout, res.stdout
    assert f"config           {cfg}" in res.stdout


def test_config_that_does_not_load_is_exit_2(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    logs = saved_run(tmp_path)
    res = cli("resume-check", str(logs), "--config", str(tmp_path / "missing.toml"))
    assert res.code == 2 and "missing.toml: file not found" in res.stderr
    cfg = config(tmp_path, "[training]\nlr = 1\nlr = 2\n")
    res = cli("resume-check", str(logs), "--config", str(cfg))
    assert res.code == 2 and "[training] lr: set twice" in res.stderr and "Traceback" not in res.stderr
