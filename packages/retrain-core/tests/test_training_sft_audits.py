"""Audited SFT data (`sft_audit_*`, `sft_token_audit_*`): an audit whose bytes match its pin and
whose record matches the data, the config and the installed tokenizer files passes and becomes
provenance; every mismatch is named in one error, field by field; the token audit's promise
(no row over the cap) is checked on the tokens the run makes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from retrain.config.schema import TrainConfig
from retrain.training.sft.contract import (
    check_tokens,
    hub_snapshot,
    transformers_version,
    verify_audits,
)
from retrain.training.sft.data import load_sft_data, read_sft_data
from retrain.training.sft.records import SftDataError
from retrain.validation.load import load_config

ROWS = [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(6)]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(path: Path, obj: Any) -> str:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj, indent=1).encode()
    path.write_bytes(raw)
    return sha(raw)


def jsonl(rows: list[dict[str, str]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def make_config(tmp_path: Path, **training: Any) -> TrainConfig:
    c = TrainConfig()
    t = msgspec.structs.replace(c.training, trainer="sft", sft_data_path=str(tmp_path / "data.jsonl"),
                                max_tokens=64, **training)
    m = msgspec.structs.replace(c.model, model="org/model", revision="a" * 40, local_files_only=True)
    return msgspec.structs.replace(c, training=t, model=m)


def row_audit(data: bytes, **fields: Any) -> dict[str, Any]:
    return {"schema": "retrain.sft_audit.v1", "status": "pass", "checks": {"dedup": True}, "failed_checks": [],
            "audited_dataset": {"sha256": sha(data), "rows": data.count(b"\n")}, "corpus_mode": "replacement",
            **fields}


@pytest.fixture
def data(tmp_path: Path) -> bytes:
    raw = jsonl(ROWS)
    (tmp_path / "data.jsonl").write_bytes(raw)
    return raw


def audited(tmp_path: Path, audit: dict[str, Any]) -> TrainConfig:
    pin = write(tmp_path / "audit.json", audit)
    return make_config(tmp_path, sft_audit_path=str(tmp_path / "audit.json"), sft_audit_sha256=pin)


def problems(config: TrainConfig) -> str:
    with pytest.raises(SftDataError) as info:
        load_sft_data(config)
    return str(info.value)


def test_a_row_audit_that_holds_becomes_provenance(tmp_path: Path, data: bytes) -> None:
    loaded = load_sft_data(audited(tmp_path, row_audit(data)))
    audit = loaded.provenance()["audit"]
    assert audit["status"] == "pass" and audit["corpus_mode"] == "replacement"
    assert audit["sha256"] == sha((tmp_path / "audit.json").read_bytes())
    assert loaded.provenance()["sha256"] == sha(data) and loaded.provenance()["token_audit"] is None


def test_the_pin_is_checked_before_the_content(tmp_path: Path, data: bytes) -> None:
    config = audited(tmp_path, row_audit(data))
    (tmp_path / "audit.json").write_text("{}")
    text = problems(config)
    assert "[training] sft_audit_sha256: expected" in text and "{}" not in text


def test_every_mismatch_is_named(tmp_path: Path, data: bytes) -> None:
    audit = row_audit(data, status="fail", checks={"dedup": True, "toxicity": False}, failed_checks=["toxicity"],
                      audited_dataset={"sha256": "0" * 64, "rows": 5}, corpus_mode="merge")
    text = problems(audited(tmp_path, audit))
    for expected in ("status must be 'pass'", "not passing: toxicity", "failed_checks must be an empty list",
                     "audited_dataset.sha256 is 0000", "audited_dataset.rows is 5, but", "corpus_mode must be"):
        assert expected in text, (expected, text)


def test_a_patch_lineage_is_proved_by_the_patch_file(tmp_path: Path, data: bytes) -> None:
    base, patch = jsonl(ROWS[:4]), jsonl(ROWS[4:])
    assert base + patch == data
    (tmp_path / "patch.jsonl").write_bytes(patch)
    lineage = {"base": {"sha256": sha(base), "rows": 4}, "patch": {"sha256": sha(patch), "rows": 2, "path": "patch.jsonl"}}
    load_sft_data(audited(tmp_path, row_audit(data, corpus_mode="patch", lineage=lineage)))
    (tmp_path / "patch.jsonl").write_bytes(jsonl(ROWS[3:]))  # a patch that is not the data's tail
    lineage["patch"]["sha256"] = sha(jsonl(ROWS[3:]))
    text = problems(audited(tmp_path, row_audit(data, corpus_mode="patch", lineage=lineage)))
    assert "does not end with the bytes of lineage.patch" not in text and "before the patch does not hash" in text
    lineage["base"]["rows"] = 3
    assert "lineage.base.rows + lineage.patch.rows = 5" in problems(
        audited(tmp_path, row_audit(data, corpus_mode="patch", lineage=lineage)))


def token_audit(tmp_path: Path, data: bytes, config: TrainConfig, **fields: Any) -> dict[str, Any]:
    snapshot = hub_snapshot(config.model.model, config.model.revision)
    snapshot.mkdir(parents=True, exist_ok=True)
    tok = write(snapshot / "tokenizer.json", b'{"model": "chars"}')
    impl = write(tmp_path / "audit_tokens.py", b"# the project's token audit\n")
    return {"schema": "my_project.token_audit.v2", "status": "pass", "dataset": {"sha256": sha(data), "rows": 6},
            "training_contract": {"trainer": "sft", "model": "org/model", "sft_max_tokens": 64,
                                  "tokenizer_revision": "a" * 40,
                                  "transformers_version": transformers_version()},
            "rows_over_training_cap": 0, "tokens": {"max": 12},
            "implementation": [{"path": "audit_tokens.py", "sha256": impl}],
            "tokenizer_snapshot": [{"path": "tokenizer.json", "sha256": tok}], **fields}


def token_audited(tmp_path: Path, audit: dict[str, Any]) -> TrainConfig:
    pin = write(tmp_path / "tokens.json", audit)
    return make_config(tmp_path, sft_token_audit_path=str(tmp_path / "tokens.json"), sft_token_audit_sha256=pin)


def test_a_token_audit_holds_against_the_cache_and_the_contract(tmp_path: Path, data: bytes,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    config = make_config(tmp_path)
    assert hub_snapshot("org/model", "a" * 40) == tmp_path / "hub" / "models--org--model" / "snapshots" / ("a" * 40)
    loaded = load_sft_data(token_audited(tmp_path, token_audit(tmp_path, data, config)))
    token = loaded.provenance()["token_audit"]
    assert token["schema"] == "my_project.token_audit.v2" and token["sft_max_tokens"] == 64
    audit = token_audit(tmp_path, data, config, rows_over_training_cap=2, tokens={"max": 99})
    audit["training_contract"] = {**audit["training_contract"], "transformers_version": "0.0.1", "sft_max_tokens": 32}
    text = problems(token_audited(tmp_path, audit))
    for expected in ("training_contract.transformers_version is '0.0.1'", "training_contract.sft_max_tokens is 32",
                     "rows_over_training_cap must be 0", "tokens.max is 99, over this run's SFT token cap 64"):
        assert expected in text, (expected, text)


def test_tokenizer_files_must_be_in_the_cache_and_unchanged(tmp_path: Path, data: bytes,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    config = make_config(tmp_path)
    audit = token_audit(tmp_path, data, config)
    (hub_snapshot("org/model", "a" * 40) / "tokenizer.json").write_bytes(b"changed")
    (tmp_path / "audit_tokens.py").write_text("# edited\n")
    text = problems(token_audited(tmp_path, audit))
    assert "tokenizer_snapshot[0]" in text and "changed since the audit" in text
    assert "implementation[0]" in text
    audit["tokenizer_snapshot"] = [{"path": "../escape.json", "sha256": "0" * 64}]
    assert "must be a relative path inside the snapshot" in problems(token_audited(tmp_path, audit))


def test_the_run_checks_the_cap_promise_on_its_own_tokens(tmp_path: Path, data: bytes) -> None:
    config = make_config(tmp_path, sft_max_tokens=10)
    assert check_tokens(config, [4, 10, 9]) == {"rows": 3, "tokens_max": 10}
    with pytest.raises(SftDataError, match="this run's tokenizer makes 2 such rows"):
        check_tokens(config, [11, 4, 13])


def test_audit_keys_are_live_and_their_rules_hold(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "c.toml"
    p.write_text(f'[training]\ntrainer = "sft"\nsft_data_path = "{tmp_path / "data.jsonl"}"\n'
                 f'sft_audit_path = "audit.json"\nsft_audit_sha256 = "{"ab" * 32}"\n')
    assert load_config(p).config.training.sft_audit_sha256 == "ab" * 32
    assert read_sft_data(str(tmp_path / "data.jsonl")).audits == {}
    config = make_config(tmp_path)
    assert verify_audits(config, read_sft_data(str(tmp_path / "data.jsonl"))) == {"audit": None, "token_audit": None}
