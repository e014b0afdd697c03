"""Snapshots redact secrets wherever they hide."""

from __future__ import annotations

from retrain.config import TrainConfig, parse_overrides
from retrain.config.snapshot import REDACTED, config_snapshot, redact_url
from retrain.validation.load import apply_overrides


def test_redaction() -> None:
    # keys not built yet (validation refuses them) still never reach a snapshot in clear
    c, issues = apply_overrides(TrainConfig(), parse_overrides([
        "--environment-args", '{"api_key": "sk-1", "nested": {"password": "p"}, "ok": "v"}',
        "--inference-url", "https://user:pw@host/v1?token=abc&x=1#frag",
        "--trainer-command", "SECRET=1 run.sh",
    ]))
    assert not issues
    snap = config_snapshot(c)
    assert snap["environment_args"] == {"api_key": REDACTED, "nested": {"password": REDACTED}, "ok": "v"}
    assert snap["inference_url"] == f"https://{REDACTED}@host/v1?token={REDACTED}&x=1#{REDACTED}"
    assert snap["trainer_command"] == REDACTED
    assert snap["lr"] == 4e-5


def test_plain_urls_untouched() -> None:
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
