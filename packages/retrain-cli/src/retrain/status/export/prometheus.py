"""Prometheus exposition of a snapshot through a prometheus-client custom collector.

Every name starts with `retrain_` (the reference used `soma_retrain_`). Per-run gauges carry
the labels run (path relative to the log root), campaign ("" for a standalone run) and
condition; a value the run has not logged is omitted rather than exported as 0. States are
exported enum-style: one series per possible state, 1 for the current one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from retrain.status.export.scan import SnapshotCache
from retrain.status.report import STATES, RunSummary

PREFIX = "retrain_"
RUN_LABELS = ("run", "campaign", "condition")
CAMPAIGN_STATUSES = ("running", "partial", "done", "dead")
_MB = 1024 * 1024


def _rss_bytes(r: RunSummary) -> float | None:
    return None if r.process_max_rss_mb is None else r.process_max_rss_mb * _MB


def _alive(r: RunSummary) -> float | None:
    return None if r.alive is None else float(r.alive)


#: (name without prefix, help, value of a run)
RUN_GAUGES: tuple[tuple[str, str, Callable[[RunSummary], float | int | None]], ...] = (
    ("run_step", "Last logged step (0-based).", lambda r: r.step),
    ("run_max_steps", "Planned steps of the run, when known.", lambda r: r.max_steps),
    ("run_mean_reward", "Mean reward of the last logged step.", lambda r: r.mean_reward),
    ("run_correct_rate", "Fraction of correct completions in the last logged step.", lambda r: r.correct_rate),
    ("run_loss", "Loss of the last logged step.", lambda r: r.loss),
    ("run_tokens_per_second", "Throughput of the last logged step.", lambda r: r.tokens_per_second),
    ("run_step_time_seconds", "Wall-clock time of the last logged step.", lambda r: r.latest_step_time_s),
    ("run_sample_share", "Share of the last step spent sampling.", lambda r: r.sample_share),
    ("run_train_share", "Share of the last step spent training.", lambda r: r.train_share),
    ("run_process_max_rss_bytes", "Peak resident memory of the trainer process.", _rss_bytes),
    ("run_wall_time_seconds", "Sum of step times (estimated from the newest rows for long runs).",
     lambda r: r.wall_time_s),
    ("run_last_step_timestamp_seconds", "Unix time of the last metrics.jsonl write.", lambda r: r.last_update),
    ("run_pid_alive", "1 when the run's process is alive, 0 when gone (absent without a pid).", _alive),
    ("run_eval_step", "RL steps done when the latest held-out evaluation ran.", lambda r: r.eval_step),
    ("run_eval_pass_at_1", "Held-out pass@1 of the latest evaluation.", lambda r: r.eval_pass_at_1),
    ("run_eval_pass_at_k", "Held-out pass@k of the latest evaluation (k: retrain_run_eval_k).",
     lambda r: r.eval_pass_at_k),
    ("run_eval_k", "Samples per problem of the latest evaluation.", lambda r: r.eval_k),
    ("run_eval_mean_reward", "Mean reward over the samples of the latest evaluation.", lambda r: r.eval_mean_reward),
)


def _labels(r: RunSummary, campaign: str) -> list[str]:
    return [r.run, campaign, r.condition or ""]


class StatusCollector(Collector):
    def __init__(self, cache: SnapshotCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self.cache.get()
        report = snapshot.report
        runs = [(r, c.run) for c in report.campaigns for r in c.runs] + [(r, "") for r in report.runs]

        info = GaugeMetricFamily(PREFIX + "run_info", "Run identity; always 1.",
                                 labels=[*RUN_LABELS, "seed", "trainer", "phase", "train_time_semantics"])
        state = GaugeMetricFamily(PREFIX + "run_state", "1 for the run's current state.",
                                  labels=[*RUN_LABELS, "state"])
        gauges = [(GaugeMetricFamily(PREFIX + name, doc, labels=list(RUN_LABELS)), value)
                  for name, doc, value in RUN_GAUGES]
        for r, campaign in runs:
            labels = _labels(r, campaign)
            info.add_metric([*labels, "" if r.seed is None else str(r.seed), r.trainer or "unknown",
                             r.phase or "", r.train_time_semantics or "unspecified"], 1)
            for name in STATES:
                state.add_metric([*labels, name], float(r.state == name))
            for family, value in gauges:
                v = value(r)
                if v is not None:
                    family.add_metric(labels, float(v))
        yield info
        yield state
        yield from (family for family, _ in gauges)

        totals = Counter(r.state for r, _ in runs)
        by_state = GaugeMetricFamily(PREFIX + "runs", "Runs under the log root by state.", labels=["state"])
        for name in STATES:
            by_state.add_metric([name], totals[name])
        yield by_state

        campaign_runs = GaugeMetricFamily(PREFIX + "campaign_runs", "Runs of a campaign by state.",
                                          labels=["campaign", "state"])
        campaign_status = GaugeMetricFamily(PREFIX + "campaign_status", "1 for the campaign's status.",
                                            labels=["campaign", "status"])
        for c in report.campaigns:
            for name in STATES:
                campaign_runs.add_metric([c.run, name], c.counts.get(name, 0))
            for name in CAMPAIGN_STATUSES:
                campaign_status.add_metric([c.run, name], float(c.status == name))
        yield campaign_runs
        yield campaign_status

        statuses = Counter(c.status for c in report.campaigns)
        campaigns = GaugeMetricFamily(PREFIX + "campaigns", "Campaigns under the log root by status.",
                                      labels=["status"])
        for name in CAMPAIGN_STATUSES:
            campaigns.add_metric([name], statuses[name])
        yield campaigns

        yield GaugeMetricFamily(PREFIX + "exporter_scan_duration_seconds",
                                "Duration of the scan behind this snapshot.", value=snapshot.scan_seconds)
        yield GaugeMetricFamily(PREFIX + "exporter_scan_timestamp_seconds",
                                "Unix time of the scan behind this snapshot.", value=snapshot.generated_at)


def build_registry(cache: SnapshotCache) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(cache))
    return registry


def metrics_body(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
