"""`retrain trace [CONFIG] [--flag value ...] [--json]`: the flow preflight (no GPU, no torch),
then the reward called once on a sample completion.

Exit status 0 when the trace passes, 1 when it finds an error (the reason is printed),
2 for a config that does not load or a reward that raises or returns no number.
"""

from __future__ import annotations

import json
import sys

from retrain.commands.config_args import resolve_config_args
from retrain.commands.errors import CommandFailed
from retrain.commands.machine import machine_warnings
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.validation.load import load_config
from retrain.validation.trace import TraceReport, trace


def render_text(report: TraceReport, probe: str = "") -> str:
    flow = report.flow
    pipeline = flow.pipeline
    lines = [
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


def run(args: list[str], as_json: bool) -> None:
    path, overrides = resolve_config_args(args)
    loaded = load_config(path, overrides)
    for warning in machine_warnings(loaded.config):
        print(f"warning: {warning}", file=sys.stderr)
    report = trace(loaded.config)
    probe = reward_probe(loaded.config) if report.ok else ""
    if as_json:
        print(json.dumps({**report.to_dict(), "reward_probe": probe}, indent=2))
    else:
        print(render_text(report, probe))
    if not report.ok:
        errors = [i.message for i in report.issues if i.severity == "error"]
        raise CommandFailed(
            f"trace failed: {errors[0]}"
            if len(errors) == 1
            else f"trace failed with {len(errors)} errors",
            code=1,
        )
