"""Snapshots redact secrets wherever they hide."""

from __future__ import annotations

from retrain.config import load_config
from retrain.config.snapshot import REDACTED, config_snapshot, redact_url


def test_redaction() -> None:
    c = load_config(None, [
        "--environment-args", '{"api_key": "sk-1", "nested": {"password": "p"}, "ok": "v"}',
        "--inference-url", "https://user:pw@host/v1?token=abc&x=1#frag",
        "--trainer-command", "SECRET=1 run.sh",
    ], import_plugins=False).config
    snap = config_snapshot(c)
    assert snap["environment_args"] == {"api_key": REDACTED, "nested": {"password": REDACTED}, "ok": "v"}
    assert snap["inference_url"] == f"https://{REDACTED}@host/v1?token={REDACTED}&x=1#{REDACTED}"
    assert snap["trainer_command"] == REDACTED
    assert snap["lr"] == 4e-5


def test_plain_urls_untouched() -> None:
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
