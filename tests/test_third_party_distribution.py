"""A third party is a peer of the built-ins: one distribution outside the workspace registers a
backend (with its own capabilities, option schema, not-built option and refused setting), an
objective and a tracker, and nothing in core is edited for any of them. Validation judges a
config by the backend's own record, `retrain backends` and `retrain plugins` list all three as
they list the built-ins, and a run trains through the backend with the objective while the
tracker receives its rows.

The objective and the tracker alone are covered in depth by test_objective_entry_point and
test_trackers_run; this file is about the three together and the backend's definition."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_objective_entry_point import OBJECTIVE
from test_trackers_run import JSONSINK
from tiny_run import retrain, write_tiny_run

from retrain.config.errors import ConfigError
from retrain.io.log import read_jsonl
from retrain.validation.load import load_config

DEFINITION = '''
from retrain.backends.catalog import BackendCapabilities, BackendDefinition, RefusedSetting
from retrain.backends.options import bool_option, str_option

BACKEND = BackendDefinition(
    name="tiny_lora",
    factory="tiny_peer.create:make",
    distribution="retrain-tiny-peer",
    contract=(2, 0),
    option_schema={
        "greeting": str_option("hello", ("hello", "hi"), description="Written beside the logs at start."),
        "warp_drive": bool_option(False, "Not built: true is refused."),
    },
    not_built_options={"warp_drive": ("the warp drive", "remove it")},
    capabilities=BackendCapabilities(
        preserves_token_advantages=True,
        checkpoint_resume_mode="adapter_only",
        ppo_clipping=True,
        local_devices=True,
        tensor_objectives=True,
        refused_settings=(RefusedSetting("training.min_p", "the tiny sampler has no min_p",
                                         "remove it; top_p works"),),
    ),
)
'''

CREATE = '''
from pathlib import Path


def make(config):
    """The local backend, after writing down the option this backend's schema gave it."""
    from retrain.backends.local.create import create_backend

    Path(config.logging.log_dir).mkdir(parents=True, exist_ok=True)
    (Path(config.logging.log_dir) / "greeting.txt").write_text(config.backend.options["greeting"])
    return create_backend(config)
'''

PEER = "retrain-tiny-peer"


@pytest.fixture
def peer(install_distribution) -> None:  # type: ignore[no-untyped-def]
    install_distribution(PEER, "0.1.0", {
        "retrain.backends": {"tiny_lora": "tiny_peer.definition:BACKEND"},
        "retrain.objectives": {"positive_only": "tiny_objective:OBJECTIVE"},
        "retrain.trackers": {"jsonsink": "jsonsink:JsonSink"},
    }, {"tiny_peer/__init__.py": "", "tiny_peer/definition.py": DEFINITION, "tiny_peer/create.py": CREATE,
        "tiny_objective.py": OBJECTIVE, "jsonsink.py": JSONSINK})


def errors(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "c.toml"
    path.write_text('[model]\nmodel = "tiny"\n[backend]\nbackend = "tiny_lora"\ndevices = "cpu"\n' + text)
    with pytest.raises(ConfigError) as info:
        load_config(path, [], import_plugins=False)
    return [issue.render() for issue in info.value.issues]


def test_validation_judges_by_the_backends_own_definition(tmp_path: Path, peer: None) -> None:
    (unknown,) = errors(tmp_path, "[backend.options]\ngreetings = 'hi'\n")
    assert "unknown option for backend 'tiny_lora'" in unknown and "greeting" in unknown
    (choice,) = errors(tmp_path, "[backend.options]\ngreeting = 'hey'\n")
    assert "'hey': must be one of hello, hi" in choice
    (unbuilt,) = errors(tmp_path, "[backend.options]\nwarp_drive = true\n")
    assert "[backend.options] warp_drive: the warp drive is not built yet in this version" in unbuilt
    (refused,) = errors(tmp_path, "[training]\nmin_p = 0.1\n")
    assert 'cannot be set with backend = "tiny_lora": the tiny sampler has no min_p' in refused
    assert "remove it; top_p works" in refused
    # what it does not declare is refused as for any backend that lacks it, with its name
    (kl,) = errors(tmp_path, "[training]\nkl_coef = 0.1\n")
    assert "not available on backend 'tiny_lora'" in kl and 'or backend = "local"' in kl
    (tmp_path / "ok.toml").write_text('[model]\nmodel = "tiny"\n[backend]\nbackend = "tiny_lora"\ndevices = "cpu"\n')
    config = load_config(tmp_path / "ok.toml", ["--backend-opt", "greeting=hi"], import_plugins=False).config
    assert config.backend.options == {"greeting": "hi", "warp_drive": False}  # normalised by its schema


def test_backends_and_plugins_list_the_peer_as_they_list_the_builtins(peer: None) -> None:
    from retrain.backends.catalog import describe_catalog
    from retrain.commands.plugins.run import describe
    from retrain.config.schema import TrainConfig

    catalog = describe_catalog()
    (entry,) = [e for e in catalog["entry_points"] if e["name"] == "tiny_lora"]
    assert entry["distribution"] == PEER and entry["status"] == "available" and entry["contract"] == "2.0"
    assert entry["capabilities"]["tensor_objectives"] is True
    assert entry["capabilities"]["refused_settings"] == [{"key": "training.min_p", "why": "the tiny sampler has "
                                                          "no min_p", "hint": "remove it; top_p works"}]
    assert entry["option_schema"]["greeting"]["choices"] == ["hello", "hi"]
    assert entry["option_schema"]["warp_drive"]["built"] is False
    assert set(entry) == set(catalog["builtins"][0])  # described field for field as a built-in
    kinds = describe(TrainConfig(), [])["kinds"]
    for kind, name in (("backend", "tiny_lora"), ("objective", "positive_only"), ("tracker", "jsonsink")):
        listed = {ep["name"]: ep["distribution"] for ep in kinds[kind]["entry_points"]}
        assert listed.get(name) == PEER, (kind, kinds[kind]["entry_points"])


def test_a_run_trains_through_the_peers_backend_objective_and_tracker(tmp_path: Path, peer: None) -> None:
    cfg = write_tiny_run(tmp_path, training={"policy_loss_mode": "positive_only", "clip_eps": 0.2, "top_p": 1.0},
                         tables={"backend.options": {"greeting": "hi"}})
    text = cfg.read_text().replace("[backend]\n", '[backend]\nbackend = "tiny_lora"\n')
    cfg.write_text(text.replace("[logging]\n", '[logging]\ntrackers = ["jsonsink"]\n'))
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    logs = tmp_path / "run" / "logs"
    assert (logs / "greeting.txt").read_text() == "hi"  # its factory ran, with its own option
    rows = read_jsonl(logs / "metrics.jsonl")
    assert len(rows) == 2 and all(r["policy_loss_mode"] == "positive_only" for r in rows)
    calls = read_jsonl(logs / "jsonsink.jsonl")
    assert calls[-1] == {"finish": 0} and [c["step"] for c in calls if "step" in c] == [0, 1]
    assert (tmp_path / "run" / "adapters" / "final").is_dir()
