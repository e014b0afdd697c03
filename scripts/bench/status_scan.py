"""Benchmark of `retrain status` scanning: 100 runs x 10,000 metric rows (by default).

Generates a log root in a temporary folder (not timed): one campaign of 5 conditions x 4
seeds plus standalone runs, each with a metrics.jsonl of realistic rows (a torn last line
in some), trainer_state.json, run_meta.json and run.pid (dead pids in some). Then times
`scan_all` (what `retrain status` does) and one exporter scrape. Prints one JSON object.
The files were just written, so the page cache is warm; the scan reads only file tails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from retrain.status.export.prometheus import build_registry, metrics_body
from retrain.status.export.scan import SnapshotCache
from retrain.status.scan import scan_all

BUDGET_S = 2.0
CONDITIONS = ("grpo+none", "maxrl+none", "maxrl+gtpo", "maxrl+gtpo_hicra", "maxrl+gtpo_sepa")
SEEDS = (42, 101, 202, 303)
#: A pid above the kernel's pid_max (2**22), so it is never alive.
DEAD_PID = 4_194_400


def row_template(condition: str) -> str:
    """One metrics row with the trainer's common fields; {} slots vary per step."""
    fixed = {
        "algorithm_mode": "", "advantage_mode": condition.split("+")[0],
        "transform_mode": condition.split("+")[1], "uncertainty_kind": "surprisal",
        "condition": condition, "policy_loss_mode": "ppo_clip", "backend_reports_sync_loss": True,
        "backend_preserves_token_advantages": True, "loss_is_placeholder": False,
        "batch_size": 8, "group_size": 16, "num_datums": 128, "max_token_hit_rate": 0.02,
        "train_time_semantics": "synchronous_optimizer_update", "sepa_gate_open": False,
        "reward_tie_eligible_groups": 8, "reward_tie_groups": 2, "clip_fraction": 0.01,
        "optimizer/logical_batch_sha256": "0" * 64,
    }
    head = json.dumps(fixed, separators=(",", ":"))[:-1].replace("{", "{{").replace("}", "}}")
    return (head + ',"step":{step},"mean_reward":{reward:.4f},"correct_rate":{cr:.4f},'
            '"running_correct_rate":{cr:.4f},"loss":{loss:.5f},"reported_loss":{loss:.5f},'
            '"step_time_s":{t:.3f},"sample_time_s":{st:.3f},"train_time_s":{tt:.3f},'
            '"tokens_per_step":20480,"tokens_per_second":{tps:.1f},"sample_share":0.7,'
            '"train_share":0.3,"process_max_rss_mb":{rss:.3f},"sepa_lambda":0.0}}\n')


def write_run(path: Path, rows: int, condition: str, index: int) -> int:
    path.mkdir(parents=True)
    template = row_template(condition)
    lines = [template.format(step=s, reward=0.1 + s / rows, cr=s / rows, loss=1.0 / (s + 1),
                             t=2.0 + (s % 7) * 0.01, st=1.4, tt=0.6, tps=10240.0 + s % 100,
                             rss=2048.0 + s * 0.001) for s in range(rows)]
    data = "".join(lines).encode()
    if index % 10 == 3:
        data += b'{"step":' + str(rows).encode() + b',"mean_reward":0.'
    (path / "metrics.jsonl").write_bytes(data)
    final = index % 4 == 0
    (path / "trainer_state.json").write_text(json.dumps(
        {"step": rows - 1, "checkpoint_name": "final" if final else f"checkpoint_step_{rows}"}))
    (path / "run_meta.json").write_text(json.dumps(
        {"trainer": "retrain", "status": "succeeded" if final else "running", "seed": index}))
    (path / "run.pid").write_text(f"{os.getpid() if index % 3 else DEAD_PID}\n")
    if index % 5 == 1:
        old = time.time() - 3600
        os.utime(path / "metrics.jsonl", (old, old))
    return len(data)


def generate(root: Path, runs: int, rows: int) -> int:
    total = 0
    campaign = root / "campaign_20260101_000000"
    entries = []
    campaign_runs = min(runs, len(CONDITIONS) * len(SEEDS))
    for i in range(campaign_runs):
        cond, seed = CONDITIONS[i // len(SEEDS)], SEEDS[i % len(SEEDS)]
        name = f"{cond}_s{seed}"
        total += write_run(campaign / "runs" / name, rows, cond, i)
        entries.append({"condition": cond, "seed": seed, "run_name": name,
                        "log_dir": f"logs/{campaign.name}/runs/{name}", "returncode": 0})
    (campaign / "manifest.json").write_text(json.dumps(
        {"timestamp": "20260101_000000", "conditions": list(CONDITIONS), "seeds": list(SEEDS),
         "max_steps": rows, "num_runs": campaign_runs, "runner_pid": DEAD_PID, "runs": entries}))
    for i in range(campaign_runs, runs):
        cond = CONDITIONS[i % len(CONDITIONS)]
        total += write_run(root / f"group{i % 8}" / f"run{i:03d}", rows, cond, i)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="retrain-status-bench-") as tmp:
        root = Path(tmp) / "logs"
        started = time.perf_counter()
        size = generate(root, args.runs, args.rows)
        generate_s = time.perf_counter() - started

        times = []
        report = None
        for _ in range(args.repeats):
            started = time.perf_counter()
            report = scan_all(root)
            times.append(time.perf_counter() - started)
        assert report is not None
        scanned = len(report.all_runs())
        assert scanned == args.runs, f"scanned {scanned} runs, expected {args.runs}"

        registry = build_registry(SnapshotCache(root, ttl=0.0))
        started = time.perf_counter()
        body = metrics_body(registry)
        scrape_s = time.perf_counter() - started

    median = statistics.median(times)
    print(json.dumps({
        "benchmark": "status_scan",
        "runs": args.runs,
        "rows_per_run": args.rows,
        "metrics_bytes_total": size,
        "generate_s": round(generate_s, 3),
        "repeats": args.repeats,
        "scan_s_first": round(times[0], 4),
        "scan_s_median": round(median, 4),
        "scan_s_max": round(max(times), 4),
        "exporter_scrape_s": round(scrape_s, 4),
        "exporter_body_bytes": len(body),
        "states": {s: sum(r.state == s for r in report.all_runs()) for s in sorted({r.state for r in report.all_runs()})},
        "budget_s": BUDGET_S,
        "within_budget": max(times) < BUDGET_S,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
