"""`trainer = "command"` and dotted-path trainer plugins, run through the real command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

WRITE_ADAPTER = '''
import json, pathlib, sys
config = json.loads(pathlib.Path(sys.argv[1]).read_text())
out = pathlib.Path(sys.argv[2])
out.mkdir(parents=True)
(out / "adapter_config.json").write_text(json.dumps({"steps": config["max_steps"], "model": sys.argv[3]}))
'''


def command_config(root: Path, command: str) -> Path:
    (root / "write_adapter.py").write_text(WRITE_ADAPTER)
    cfg = root / "c.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
[backend]
adapter_path = "{root / 'out' / 'adapter'}"
[training]
trainer = "command"
max_steps = 3
trainer_command = {json.dumps(command)}
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def test_command_trainer_runs_the_template(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = command_config(tmp_path, f"{sys.executable} write_adapter.py {{config_path}} {{adapter_path}} {{model}}")
    res = cli(str(cfg))
    assert res.code == 0, res.stderr
    written = json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())
    assert written == {"steps": 3, "model": "tiny"}
    dumped = json.loads((tmp_path / "logs" / "retrain_config.json").read_text())
    assert dumped["trainer"] == "command" and dumped["max_steps"] == 3
    meta = json.loads((tmp_path / "logs" / "run_meta.json").read_text())
    assert meta["status"] == "succeeded" and meta["policy_ref"] == str(tmp_path / "out" / "adapter")


def test_command_trainer_needs_exit_zero_and_the_adapter(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = command_config(tmp_path, f"{sys.executable} -c 'raise SystemExit(3)'")
    res = cli(str(cfg))
    assert res.code == 1 and "trainer command exited with status 3" in res.stderr
    meta = json.loads((tmp_path / "logs" / "run_meta.json").read_text())
    assert meta["status"] == "failed" and meta["failure_status"] == "exit_code:3"
    cfg = command_config(tmp_path, "true {log_dir}")
    res = cli(str(cfg))
    assert res.code == 1 and "left no adapter at" in res.stderr
    assert json.loads((tmp_path / "logs" / "run_meta.json").read_text())["failure_status"] == "missing_policy_ref"


def test_command_template_is_validated(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "c.toml").write_text("[training]\ntrainer = 'command'\ntrainer_command = 'train {cfg}'\n")
    res = cli("explain", "c.toml")
    assert res.code == 2 and "[training] trainer_command: unknown placeholder {cfg}" in res.stderr
    (tmp_path / "c.toml").write_text("[training]\ntrainer_command = 'train {config_path}'\n")
    res = cli("explain", "c.toml")
    assert res.code == 2 and "[training] trainer_command: only used with trainer = command" in res.stderr


PLUGIN = '''
import json, pathlib

class Recorder:
    def __init__(self, config):
        self.model = config.model.model

    def run(self, config):
        out = pathlib.Path(config.backend.adapter_path)
        out.mkdir(parents=True)
        (out / "trained.json").write_text(json.dumps({"model": self.model, "steps": config.training.max_steps}))
        return str(out)

def make(config):
    return Recorder(config)

def broken(config):
    return 42
'''


def plugin_config(root: Path, target: str) -> Path:
    (root / "plugins").mkdir(exist_ok=True)
    (root / "plugins" / "my_trainer.py").write_text(PLUGIN)
    cfg = root / "c.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
[backend]
adapter_path = "{root / 'adapter'}"
[training]
trainer = "{target}"
max_steps = 5
[logging]
log_dir = "{root / 'logs'}"
""")
    return cfg


def test_dotted_trainer_plugin_runs(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = cli(str(plugin_config(tmp_path, "my_trainer.make")))
    assert res.code == 0, res.stderr
    assert json.loads((tmp_path / "adapter" / "trained.json").read_text()) == {"model": "tiny", "steps": 5}
    meta = json.loads((tmp_path / "logs" / "run_meta.json").read_text())
    assert meta["trainer"] == "my_trainer.make" and meta["policy_ref"] == str(tmp_path / "adapter")


def test_trainer_plugin_without_run_is_refused(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = cli(str(plugin_config(tmp_path, "my_trainer.broken")))
    assert res.code == 2 and "'my_trainer.broken' returned int, which has no run(config) method" in res.stderr
    res = cli(str(plugin_config(tmp_path, "my_trainer.missing")))
    assert res.code == 2 and "[training] trainer" in res.stderr and "has no attribute 'missing'" in res.stderr


def test_trainers_are_listed_and_scaffolded(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    listed = json.loads(cli("plugins", "--json").stdout)
    assert listed["builtins"]["trainer"] == ["command", "optimizer_replay", "retrain", "sft", "ttt_discover"]
    res = cli("init-plugin", "--kind", "trainer", "--name", "my loop")
    assert res.code == 0 and 'trainer = "my_loop.my_loop"' in res.stdout
    toml = res.stdout.split("Add to your config:\n\n", 1)[1].split("Run it with")[0]
    (tmp_path / "retrain.toml").write_text(toml)
    explained = cli("explain", "--json")
    assert explained.code == 0, explained.stderr
    assert json.loads(explained.stdout)["trainer"] == "my_loop.my_loop"


def test_manual_topic(cli) -> None:  # type: ignore[no-untyped-def]
    text = cli("man", "trainers").stdout
    assert "{config_path}" in text and "ttt_discover" in text and "init-plugin --kind trainer" in text
