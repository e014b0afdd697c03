"""`[inference] routing_replay`: live with a backend that replays routing and an engine that
records it (the local backend's in-process engine); refused in one line naming the key and the
reason for a backend that cannot replay (asked of its capabilities), for each server engine,
and for multi-turn episodes, whose turns carry no routes."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.backends.catalog import definition_of
from retrain.config import ConfigError
from retrain.validation.load import load_config

NOT_BUILT_TEXT = "not built yet in this version"
KEY = "[inference] routing_replay"


def errors_of(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(p, [])
    return [i.render() for i in info.value.issues if KEY in i.render()]


def test_the_in_process_engine_records_and_the_local_backend_replays(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[inference]\nrouting_replay = true\n")
    assert load_config(p).config.inference.routing_replay
    assert definition_of("local").capabilities.routing_replay_engines == ("pytorch",)


@pytest.mark.parametrize(("engine", "why"), [
    ("vllm", "retrain does not read vLLM's routed_experts output yet (--enable-return-routed-experts needs"),
    ("sglang", "SGLang's OpenAI-compatible server does not return the experts it routed to"),
    ("openai", "an OpenAI-compatible server does not return the experts it routed to"),
])
def test_a_server_engine_that_returns_no_routes_is_refused_by_name(tmp_path: Path, engine: str, why: str) -> None:
    errs = errors_of(tmp_path, f'[inference]\nengine = "{engine}"\nrouting_replay = true\n')
    assert len(errs) == 1 and f'with engine = "{engine}" is {NOT_BUILT_TEXT}: {why}' in errs[0], errs
    assert "\n" not in errs[0]


def test_a_backend_that_cannot_replay_is_refused_by_its_capabilities(tmp_path: Path) -> None:
    assert definition_of("tinker").capabilities.routing_replay_engines == ()
    errs = errors_of(tmp_path, "[backend]\nbackend = 'tinker'\n[inference]\nrouting_replay = true\n")
    assert len(errs) == 1 and "needs backend = local" in errs[0] and "'tinker'" in errs[0], errs


def test_multi_turn_episodes_are_refused(tmp_path: Path) -> None:
    errs = errors_of(tmp_path, '[environment]\nprovider = "openenv"\nid = "http://127.0.0.1:1"\n'
                               '[inference]\nrouting_replay = true\n')
    assert len(errs) == 1 and f"with multi-turn episodes (OpenEnv) is {NOT_BUILT_TEXT}" in errs[0], errs
