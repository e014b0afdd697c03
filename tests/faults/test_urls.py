"""Every URL a config names must be one a client can ask, checked when the config loads (a
judge at port 99999 loaded, and every completion of the run failed to score): each URL-valued
key, from the file or the command line, with its line and what is wrong; a URL that an
environment variable supplies is checked where it is read, naming the variable."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from retrain.config.errors import ConfigError
from retrain.config.schema import TrainConfig
from retrain.rewards.types import RewardUnavailable
from retrain.validation.load import load_config


@pytest.mark.parametrize(("table", "line", "why"), [
    ('[reward]\ntype = "judge"\njudge_base_url = "http://127.0.0.1:99999/v1"',
     "[reward] judge_base_url: 'http://127.0.0.1:99999/v1' has a port that is not a number from 1 to 65535", 3),
    ('[inference]\nengine = "vllm"\nurl = "http://127.0.0.1:0"',
     "[inference] url: 'http://127.0.0.1:0' has port 0", 3),
    ('[inference]\nengine = "vllm"\nurl = "http://127.0.0.1:80 00"',
     "[inference] url: 'http://127.0.0.1:80 00' is not a URL", 3),
    ('[backend]\nbackend = "tinker"\n[model]\nmodel = "Qwen/Qwen3-4B-Instruct-2507"\nbase_url = "https:///api"',
     "[model] base_url: 'https:///api' names no host", 5),
    ('[environment]\nprovider = "openenv"\nid = "ws://127.0.0.1:123456"',
     "[environment] id: 'ws://127.0.0.1:123456' has a port that is not a number", 3),
    ('[environment]\nprovider = "openenv"\nid = "ftp://127.0.0.1:8000"',
     "[environment] id: 'ftp://127.0.0.1:8000' must be an http://, https://, ws:// or wss:// URL", 3),
], ids=["judge", "inference-port-0", "inference-space", "tinker", "openenv-port", "openenv-scheme"])
def test_a_bad_url_is_refused_at_load_with_its_line(tmp_path: Path, table: str, line: str, why: int) -> None:
    path = tmp_path / "c.toml"
    path.write_text(table + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    rendered = [i.render() for i in info.value.issues]
    assert any(r.startswith(f"{path}:{why}: {line}") for r in rendered), rendered


def test_a_bad_url_on_the_command_line_names_the_flag() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["--inference-url", "http://127.0.0.1:99999", "--inference-engine", "vllm"])
    assert any(i.render().startswith("--inference-url (command line): 'http://127.0.0.1:99999' has a port")
               for i in info.value.issues), info.value.issues


def test_a_bad_url_from_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.rewards.judge.scorer import build_judge

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:99999/v1")
    c = TrainConfig()
    c = msgspec.structs.replace(c, reward=msgspec.structs.replace(c.reward, type="judge", judge_api_key_env=""))
    with pytest.raises(RewardUnavailable, match=r"\$OPENAI_BASE_URL = 'http://127.0.0.1:99999/v1' has a port"):
        build_judge(c)


def test_a_bad_tinker_url_from_the_environment_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from retrain.backends.errors import BackendUnavailable
    from retrain.backends.tinker.runtime import service

    monkeypatch.setenv("TINKER_API_KEY", "tml-test")
    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:65536")
    with pytest.raises(BackendUnavailable, match=r"\$TINKER_BASE_URL = 'http://127.0.0.1:65536' has a port"):
        service(TrainConfig())


@pytest.mark.parametrize(("address", "why"), [
    ("", None), ("auto", None), ("ray://10.0.0.1:10001", None), ("10.0.0.1:6379", None),
    ("ray://10.0.0.1:100001", "has a port that is not a number from 1 to 65535"),
    ("http://10.0.0.1:8265", "must be a ray:// URL"),
    ("10.0.0.1:99999", "has a port that is not a number from 1 to 65535"),
])
def test_the_campaign_ray_address(address: str, why: str | None) -> None:
    from retrain.campaign.parse import ray_address_problem

    assert ray_address_problem(address) == why
