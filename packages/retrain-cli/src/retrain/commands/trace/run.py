"""`retrain trace [CONFIG] [--flag value ...] [--json]`: the data the run reads opened and its
keys checked against the columns (`retrain.validation.data`, as the run does before it
starts), the flow preflight (no GPU, no torch), then the reward called once on a sample
completion, and the SFT data's pins and audits verified with the provenance a run would record
(when the run reads `sft_data_path`).

Exit status 0 when the trace passes, 1 when it finds an error (the reason is printed),
2 for a config that does not load, data that cannot be read (the file and line named), or a
reward that raises or returns no number.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from retrain.commands.config_args import resolve_config_args
from retrain.commands.errors import CommandFailed
from retrain.commands.machine import machine_warnings
from retrain.commands.warnings import print_warnings
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.validation.data import check_data_files
from retrain.validation.load import load_config
from retrain.validation.trace import TraceReport, trace


def render_text(report: TraceReport, probe: str = "", sft_data: dict[str, Any] | None = None,
                data: tuple[str, ...] = ()) -> str:
    flow = report.flow
    pipeline = flow.pipeline
    lines = [
        *(f"Data: {line}" for line in data),
        f"Condition: {flow.condition_label}",
        f"Backend: {flow.backend} (source: {flow.backend_source})",
        f"Token advantages: {'per token' if flow.capabilities.preserves_token_advantages else 'one per completion'}",
        f"Capabilities: {flow.capabilities.summary()}",
    ]
    if pipeline is not None:
        d = pipeline.describe()
        lines.append(
            "Pipeline: "
            + ", ".join(
                f"{k}={d[k]}"
                for k in (
                    "advantage_mode",
                    "transform_mode",
                    "uncertainty_kind",
                    "needs_planning",
                    "uses_sepa_controller",
                    "token_varying",
                    "batch_normalize",
                )
            )
        )
    lines.append(f"Probes: {report.probe_cases_passed}/{report.probe_cases_run} passed")
    for issue in report.issues:
        tag = "[ERROR]" if issue.severity == "error" else "[WARN]"
        lines.append(f"{tag} [{issue.category}] {issue.message}")
    if probe:
        lines.append(probe)
    if sft_data is not None:
        lines += sft_lines(sft_data)
    lines.append("PASS" if report.ok else "FAIL")
    return "\n".join(lines)


#: the sample completion the probe scores: a well-formed answer to a question whose answer is 42
SAMPLE_PROMPT = "What is 6 times 7?"
SAMPLE_REFERENCE = "42"
SAMPLE_RESPONSE = "The answer is \\boxed{42}."


def reward_probe(config: TrainConfig) -> str:
    """Score one sample completion with the configured reward; a reward that raises, overruns
    or returns no number is a UserError naming the fault. An environment scores its own
    episodes: nothing to probe here."""
    if config.environment.provider:
        return ""
    from retrain.rewards.create import build_reward, score_answers

    with build_reward(config, workers=1) as reward:
        scored = score_answers(reward, [SAMPLE_RESPONSE], [SAMPLE_REFERENCE], [SAMPLE_PROMPT])
    if scored.errors or scored.timeouts:
        fault = scored.faults[0].line() if scored.faults else "it failed"
        raise UserError(f"[reward] type = {config.reward.type!r}: scoring a sample completion failed: {fault}",
                        hint=f"the sample: response {SAMPLE_RESPONSE!r}, reference {SAMPLE_REFERENCE!r}")
    return f"Reward: {config.reward.type} scored a sample completion {float(scored.scores[0]):g}"


def sft_provenance(config: TrainConfig) -> dict[str, Any] | None:
    """The SFT data a run would read, its pins checked and its audits verified (a UserError
    naming the mismatch otherwise); None when the run reads no SFT data."""
    t = config.training
    if not t.sft_data_path or not (t.trainer == "sft" or t.sft_warmup_steps > 0):
        return None
    from retrain.training.sft.data import load_sft_data

    return load_sft_data(config).provenance()


def sft_lines(data: dict[str, Any]) -> list[str]:
    lines = [f"SFT data: {data['path']} ({data['rows']} rows, sha256 {data['sha256']})"]
    for key, label in (("audit", "audit"), ("token_audit", "token audit")):
        audit = data.get(key)
        if audit is not None:
            lines.append(f"SFT {label}: {audit['path']} ({audit['schema']}, sha256 {audit['sha256']}): pass")
    return lines


def run(args: list[str], as_json: bool) -> None:
    path, overrides = resolve_config_args(args)
    loaded = load_config(path, overrides)
    print_warnings(loaded.warnings)  # what the run prints as it starts, before the preflight's own
    for warning in machine_warnings(loaded.config):
        print(f"warning: {warning}", file=sys.stderr)
    data = check_data_files(loaded.config).lines
    report = trace(loaded.config)
    probe = reward_probe(loaded.config) if report.ok else ""
    sft_data = sft_provenance(loaded.config) if report.ok else None
    if as_json:
        print(json.dumps({**report.to_dict(), "data": list(data), "reward_probe": probe, "sft_data": sft_data},
                         indent=2))
    else:
        print(render_text(report, probe, sft_data, data))
    if not report.ok:
        errors = [i.message for i in report.issues if i.severity == "error"]
        raise CommandFailed(
            f"trace failed: {errors[0]}"
            if len(errors) == 1
            else f"trace failed with {len(errors)} errors",
            code=1,
        )
