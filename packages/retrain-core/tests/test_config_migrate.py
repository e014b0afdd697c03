"""Legacy [backend] prime_rl_* keys move to [backend.options], preserving the text."""

from __future__ import annotations

import tomllib

from retrain.config.migrate import migrate_text

LEGACY = """# my run
[backend]
backend = "prime_rl"  # bridge
prime_rl_zmq_port = 6000
prime_rl_transport = "zmq"

[training]
lr = 1e-4
"""


def test_migrates_and_keeps_comments() -> None:
    m = migrate_text(LEGACY)
    assert m.changed and m.legacy_keys == ["prime_rl_transport", "prime_rl_zmq_port"]
    assert "# my run" in m.output_text and "# bridge" in m.output_text
    data = tomllib.loads(m.output_text)
    assert data["backend"] == {"backend": "prime_rl", "options": {"transport": "zmq", "zmq_port": 6000}}
    assert data["training"]["lr"] == 1e-4
    assert m.output_text.endswith("\n")


def test_existing_options_win() -> None:
    text = LEGACY.replace("[training]", "[backend.options]\nzmq_port = 7000\n\n[training]")
    m = migrate_text(text)
    data = tomllib.loads(m.output_text)
    assert data["backend"]["options"] == {"zmq_port": 7000, "transport": "zmq"}
    assert m.merged_backend_options == {"zmq_port": 7000, "transport": "zmq"}


def test_inline_options_table_is_replaced() -> None:
    text = '[backend]\nbackend = "prime_rl"\noptions = { zmq_hwm = 5 }\nprime_rl_zmq_port = 1\n'
    data = tomllib.loads(migrate_text(text).output_text)
    assert data["backend"]["options"] == {"zmq_port": 1, "zmq_hwm": 5}


def test_nothing_to_migrate() -> None:
    m = migrate_text("[training]\nlr = 1\n")
    assert not m.changed and m.output_text == "[training]\nlr = 1\n"
