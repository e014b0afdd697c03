"""Audited SFT data: a record made outside retrain that the data (and, for a token audit, its
tokens under this run's tokenizer and cap) passed the project's checks, pinned by its sha256.

`[training] sft_audit_path` + `sft_audit_sha256` (schema `retrain.sft_audit.v1`) and
`sft_token_audit_path` + `sft_token_audit_sha256` (any schema name) are verified as the
reference implementation verifies them, before the model loads:

- the file's bytes hash to the pin; it is a JSON object with `status: "pass"`, an empty
  `failed_checks` and only `true` values in `checks` (both optional);
- the dataset it audited is the data this run reads (`audited_dataset` / `dataset`: `sha256`
  and `rows`);
- row audit: `corpus_mode` is `replacement`, or `patch` with `lineage.base` and
  `lineage.patch` (`sha256`, `rows`, summing to the dataset's rows); when `lineage.patch.path`
  names the patch file, the data must end with its exact bytes and the rest hash to the base;
- token audit: `training_contract` names this run's trainer, model, effective SFT token cap,
  `[model] revision` and the installed transformers version; `rows_over_training_cap` is 0
  and `tokens.max` fits the cap; each `implementation` file and each `tokenizer_snapshot`
  file (in the Hugging Face cache, at that revision) still hashes as recorded.

Every mismatch is reported at once, one line each. What passes becomes the run's provenance
(`run_meta.json`, `sft_manifest.json`, `retrain trace`). When the data is tokenized, the run
checks the token audit's promise itself: no row longer than the cap (`check_tokens`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from retrain.config.schema import TrainConfig
from retrain.io.digest import file_sha256
from retrain.training.sft.records import SftData, SftDataError, sft_cap

ROW_SCHEMA = "retrain.sft_audit.v1"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def verify_audits(config: TrainConfig, data: SftData) -> dict[str, Any]:
    """{"audit": provenance or None, "token_audit": provenance or None}; SftDataError when a
    configured audit does not hold."""
    t = config.training
    out: dict[str, Any] = {"audit": None, "token_audit": None}
    if t.sft_audit_path:
        path, audit = _pinned(t.sft_audit_path, t.sft_audit_sha256, "sft_audit")
        out["audit"] = _row_audit(path, audit, data)
    if t.sft_token_audit_path:
        path, audit = _pinned(t.sft_token_audit_path, t.sft_token_audit_sha256, "sft_token_audit")
        out["token_audit"] = _token_audit(path, audit, config, data)
    return out


def check_tokens(config: TrainConfig, lengths: list[int]) -> dict[str, int]:
    """The token audit's promise, checked on the tokens this run made: no row over the cap.
    Returns what was seen, for the provenance."""
    cap = sft_cap(config)
    over = sum(n > cap for n in lengths)
    if over:
        raise SftDataError(f"[training] sft_token_audit_path: the audit says no row is longer than {cap} tokens, but "
                           f"this run's tokenizer makes {over} such rows (longest {max(lengths)})",
                           hint="re-audit the data with this model's tokenizer and chat template")
    return {"rows": len(lengths), "tokens_max": max(lengths, default=0)}


def _pinned(path_text: str, pin: str, key: str) -> tuple[Path, Mapping[str, Any]]:
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise SftDataError(f"[training] {key}_path {path_text}: no such file")
    raw = path.read_bytes()
    actual, want = hashlib.sha256(raw).hexdigest(), pin.strip().lower()
    if actual != want:
        raise SftDataError(f"[training] {key}_sha256: expected {want}, {path} has {actual}",
                           hint="update the pin if the audit was redone on purpose")
    try:
        audit = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SftDataError(f"[training] {key}_path {path}: not UTF-8 JSON ({e})") from None
    if not isinstance(audit, dict):
        raise SftDataError(f"[training] {key}_path {path}: expected a JSON object")
    return path, audit


def _fail(key: str, path: Path, errors: list[str]) -> None:
    if errors:
        raise SftDataError(f"[training] {key}_path {path} does not hold:\n  - " + "\n  - ".join(errors),
                           hint="fix the data or the audit; each line names the audit field")


def _passed(audit: Mapping[str, Any], errors: list[str]) -> None:
    if audit.get("status") != "pass":
        errors.append(f"status must be 'pass', got {audit.get('status')!r}")
    failed = audit.get("failed_checks")
    if failed is not None and (not isinstance(failed, list) or failed):
        errors.append(f"failed_checks must be an empty list, got {failed!r}")
    checks = audit.get("checks")
    if checks is not None:
        bad = sorted(str(k) for k, v in checks.items() if v is not True) if isinstance(checks, dict) else ["(not an object)"]
        if bad:
            errors.append("checks must all be true; not passing: " + ", ".join(bad))


def _table(audit: Mapping[str, Any], key: str, errors: list[str]) -> Mapping[str, Any]:
    value = audit.get(key)
    if not isinstance(value, dict):
        errors.append(f"{key} must be a JSON object")
        return {}
    return value


def _sha(table: Mapping[str, Any], key: str, where: str, errors: list[str]) -> str | None:
    value = table.get(key)
    if isinstance(value, str) and _HEX64.match(value):
        return value
    errors.append(f"{where}.{key} must be a sha256 (64 lower-case hex characters)")
    return None


def _count(table: Mapping[str, Any], key: str, where: str, errors: list[str], minimum: int = 0) -> int | None:
    value = table.get(key)
    if type(value) is int and value >= minimum:
        return value
    errors.append(f"{where}.{key} must be an integer >= {minimum}")
    return None


def _same_data(table: Mapping[str, Any], where: str, data: SftData, errors: list[str]) -> None:
    sha, rows = _sha(table, "sha256", where, errors), _count(table, "rows", where, errors)
    if sha is not None and sha != data.sha256:
        errors.append(f"{where}.sha256 is {sha}, but {data.path} has {data.sha256}")
    if rows is not None and rows != len(data.rows):
        errors.append(f"{where}.rows is {rows}, but {data.path} has {len(data.rows)} rows")


def _row_audit(path: Path, audit: Mapping[str, Any], data: SftData) -> dict[str, Any]:
    errors: list[str] = []
    if audit.get("schema") != ROW_SCHEMA:
        errors.append(f"schema must be {ROW_SCHEMA!r}, got {audit.get('schema')!r}")
    _passed(audit, errors)
    _same_data(_table(audit, "audited_dataset", errors), "audited_dataset", data, errors)
    mode, lineage = audit.get("corpus_mode"), audit.get("lineage") or {}
    if mode not in ("patch", "replacement"):
        errors.append(f"corpus_mode must be 'patch' or 'replacement', got {mode!r}")
    elif not isinstance(lineage, dict):
        errors.append("lineage must be a JSON object")
    elif mode == "replacement" and lineage:
        errors.append("lineage must be empty for corpus_mode 'replacement'")
    elif mode == "patch":
        _lineage(lineage, path, data, errors)
    _fail("sft_audit", path, errors)
    return {"path": str(path.resolve()), "sha256": file_sha256(path), "schema": ROW_SCHEMA, "status": "pass",
            "corpus_mode": mode, "lineage": dict(lineage)}


def _lineage(lineage: Mapping[str, Any], path: Path, data: SftData, errors: list[str]) -> None:
    """`patch`: the data is a base corpus followed by a patch; the patch file, when named, proves it."""
    parts = {role: _table(lineage, role, errors) for role in ("base", "patch")}
    rows = [_count(parts[r], "rows", f"lineage.{r}", errors, minimum=1) for r in parts]
    shas = {r: _sha(parts[r], "sha256", f"lineage.{r}", errors) for r in parts}
    if None not in rows and sum(r for r in rows if r is not None) != len(data.rows):
        errors.append(f"lineage.base.rows + lineage.patch.rows = {sum(r for r in rows if r is not None)}, "
                      f"but the data has {len(data.rows)} rows")
    named = parts["patch"].get("path")
    if not isinstance(named, str) or not named.strip():
        return
    patch_file = Path(named) if Path(named).is_absolute() else path.parent / named
    if not patch_file.is_file():
        errors.append(f"lineage.patch.path {named}: no such file (next to the audit: {patch_file})")
        return
    patch, whole = patch_file.read_bytes(), data.path.read_bytes()
    if shas["patch"] is not None and hashlib.sha256(patch).hexdigest() != shas["patch"]:
        errors.append(f"lineage.patch.sha256 does not match {patch_file}")
    if not patch or not whole.endswith(patch):
        errors.append(f"{data.path} does not end with the bytes of lineage.patch ({patch_file})")
    elif shas["base"] is not None and hashlib.sha256(whole[:-len(patch)]).hexdigest() != shas["base"]:
        errors.append(f"the data before the patch does not hash to lineage.base.sha256 ({shas['base']})")


def _token_audit(path: Path, audit: Mapping[str, Any], config: TrainConfig, data: SftData) -> dict[str, Any]:
    errors: list[str] = []
    schema = audit.get("schema")
    if not isinstance(schema, str) or not schema.strip() or schema != schema.strip():
        errors.append("schema must be a non-empty string without surrounding spaces")
    _passed(audit, errors)
    _same_data(_table(audit, "dataset", errors), "dataset", data, errors)
    cap = sft_cap(config)
    contract = _table(audit, "training_contract", errors)
    _contract(contract, config, cap, errors)
    if audit.get("rows_over_training_cap") != 0 or type(audit.get("rows_over_training_cap")) is not int:
        errors.append(f"rows_over_training_cap must be 0, got {audit.get('rows_over_training_cap')!r}")
    most = _count(_table(audit, "tokens", errors), "max", "tokens", errors, minimum=1)
    if most is not None and most > cap:
        errors.append(f"tokens.max is {most}, over this run's SFT token cap {cap}")
    _implementation(audit.get("implementation"), path, errors)
    _tokenizer_files(audit.get("tokenizer_snapshot"), config, errors)
    _fail("sft_token_audit", path, errors)
    return {"path": str(path.resolve()), "sha256": file_sha256(path), "schema": schema, "status": "pass",
            "model": config.model.model, "tokenizer_revision": config.model.revision, "sft_max_tokens": cap}


def transformers_version() -> str:
    """The installed transformers' version, read from its metadata (core imports no transformers)."""
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _contract(contract: Mapping[str, Any], config: TrainConfig, cap: int, errors: list[str]) -> None:
    want: dict[str, object] = {"trainer": config.training.trainer, "model": config.model.model,
                               "sft_max_tokens": cap, "tokenizer_revision": config.model.revision,
                               "transformers_version": transformers_version()}
    for key, value in want.items():
        got = contract.get(key)
        if type(got) is not type(value) or got != value:
            errors.append(f"training_contract.{key} is {got!r}, this run has {value!r}")


def _implementation(records: Any, audit_path: Path, errors: list[str]) -> None:
    """The files that made the audit (paths relative to the audit's folder), unchanged since."""
    if not isinstance(records, list) or not records:
        errors.append("implementation must be a non-empty list of {path, sha256}")
        return
    for i, record in enumerate(records):
        named = record.get("path") if isinstance(record, dict) else None
        if not isinstance(named, str) or not named.strip():
            errors.append(f"implementation[{i}].path must be a non-empty string")
            continue
        file = Path(named) if Path(named).is_absolute() else audit_path.parent / named
        sha = _sha(record, "sha256", f"implementation[{i}]", errors)
        if not file.is_file():
            errors.append(f"implementation[{i}].path {named}: no such file ({file})")
        elif sha is not None and file_sha256(file) != sha:
            errors.append(f"implementation[{i}] {file} changed since the audit")


def _tokenizer_files(records: Any, config: TrainConfig, errors: list[str]) -> None:
    """The tokenizer files the audit tokenized with, in the local Hugging Face cache at the
    configured revision (the run loads them from there: local_files_only), unchanged."""
    if not isinstance(records, list) or not records:
        errors.append("tokenizer_snapshot must be a non-empty list of {path, sha256}")
        return
    snapshot = hub_snapshot(config.model.model, config.model.revision)
    for i, record in enumerate(records):
        named = record.get("path") if isinstance(record, dict) else None
        if not isinstance(named, str) or not named.strip() or Path(named).is_absolute() or ".." in Path(named).parts:
            errors.append(f"tokenizer_snapshot[{i}].path must be a relative path inside the snapshot")
            continue
        sha = _sha(record, "sha256", f"tokenizer_snapshot[{i}]", errors)
        file = snapshot / named
        if not file.is_file():
            errors.append(f"tokenizer_snapshot[{i}] {named} is not in the local cache of "
                          f"{config.model.model}@{config.model.revision} ({snapshot})")
        elif sha is not None and file_sha256(file) != sha:
            errors.append(f"tokenizer_snapshot[{i}] {file} changed since the audit")


def hub_snapshot(model: str, revision: str) -> Path:
    """Where the Hugging Face cache keeps `model` at commit `revision` (the layout
    huggingface_hub documents: `<cache>/models--org--name/snapshots/<revision>`); a local model
    folder is its own snapshot."""
    if Path(model).expanduser().is_dir():
        return Path(model).expanduser()
    cache = os.environ.get("HF_HUB_CACHE") or (
        str(Path(os.environ["HF_HOME"]) / "hub") if os.environ.get("HF_HOME")
        else str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface" / "hub"))
    return Path(cache) / ("models--" + model.replace("/", "--")) / "snapshots" / revision
