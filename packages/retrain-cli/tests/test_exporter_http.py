import builtins
import http.client
import json
import os
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from retrain.status.export.scan import SnapshotCache
from retrain.status.export.server import make_server, serve_in_thread


@pytest.fixture
def exporter(log_tree):
    server = make_server(log_tree, "127.0.0.1", 0, ttl=0.0)
    thread = serve_in_thread(server)
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def get(server, path):
    try:
        with urllib.request.urlopen(server.url + path, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def samples(body):
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(series, **labels):
    [v] = [v for lab, v in series if all(lab.get(k) == x for k, x in labels.items())]
    return v


def test_metrics_exports_per_run_gauges_states_and_campaign_counts(exporter):
    status, ctype, body = get(exporter, "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    m = samples(body)
    assert value(m["retrain_run_step"], run="live") == 6
    assert value(m["retrain_run_eval_pass_at_1"], run="done") == pytest.approx(0.6)
    assert value(m["retrain_run_eval_pass_at_k"], run="done") == pytest.approx(1.0)
    assert value(m["retrain_run_eval_k"], run="done") == 4 and value(m["retrain_run_eval_step"], run="done") == 4
    assert "live" not in {lab["run"] for lab, _ in m["retrain_run_eval_pass_at_1"]}
    assert value(m["retrain_run_mean_reward"], run="live") == pytest.approx(0.16)
    assert value(m["retrain_run_loss"], run="done") == pytest.approx(0.25)
    assert value(m["retrain_run_tokens_per_second"], run="live") == 1006
    assert value(m["retrain_run_last_step_timestamp_seconds"], run="live") == pytest.approx(time.time(), abs=120)
    assert value(m["retrain_run_state"], run="crashed", state="dead") == 1
    assert value(m["retrain_run_state"], run="crashed", state="running") == 0
    assert value(m["retrain_run_state"], run="sleepy", state="stale") == 1
    assert value(m["retrain_run_process_max_rss_bytes"], run="live") == 518 * 1024 * 1024
    campaign = "campaign_20260101_000000"
    assert value(m["retrain_run_step"], run=f"{campaign}/runs/grpo+none_s42", campaign=campaign,
                 condition="grpo+none") == 9
    assert value(m["retrain_campaign_runs"], campaign=campaign, state="failed") == 1
    assert value(m["retrain_campaign_runs"], campaign=campaign, state="pending") == 1
    assert value(m["retrain_campaign_status"], campaign=campaign, status="running") == 1
    assert value(m["retrain_campaigns"], status="running") == 1
    assert value(m["retrain_runs"], state="finished") == 2
    assert value(m["retrain_run_info"], run="live", trainer="retrain") == 1
    # A run that logged nothing has no value series, only identity and state.
    assert not [lab for lab, _ in m["retrain_run_step"] if lab["run"] == "empty"]
    assert value(m["retrain_run_state"], run="empty", state="running") == 1
    assert "retrain_exporter_scan_duration_seconds" in m


def test_runs_and_healthz_json(exporter):
    status, ctype, body = get(exporter, "/v1/runs")
    assert status == 200 and ctype.startswith("application/json")
    data = json.loads(body)
    assert {r["run"] for r in data["runs"]} >= {"live", "done", "crashed", "sleepy", "empty", "nested/torn"}
    assert data["campaigns"][0]["failed"] == 1
    status, _, body = get(exporter, "/healthz/")
    health = json.loads(body)
    assert status == 200 and health["status"] == "ok" and health["run_count"] == 10


@pytest.mark.parametrize("path", ["/", "/metricsx", "/v1", "/v1/runs/live", "/../../etc/passwd",
                                  "/healthz/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                                  "//etc/passwd", "/metrics/../run_meta.json"])
def test_other_paths_are_404(exporter, path):
    conn = http.client.HTTPConnection("127.0.0.1", exporter.server_address[1], timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 404 and resp.read() == b"not found\n"
    conn.close()


def test_query_strings_are_ignored_and_only_get_is_served(exporter):
    assert get(exporter, "/healthz?path=/etc/passwd")[0] == 200
    conn = http.client.HTTPConnection("127.0.0.1", exporter.server_address[1], timeout=10)
    conn.request("POST", "/metrics", body=b"x")
    assert conn.getresponse().status == 501
    conn.close()


def test_requests_never_read_outside_the_log_root(exporter, log_tree, monkeypatch, tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "metrics.jsonl").write_text('{"step": 99}\n')
    (log_tree / "sneaky").mkdir()
    (log_tree / "sneaky" / "metrics.jsonl").symlink_to(secret / "metrics.jsonl")
    (secret / "pidfile").write_text(f"{os.getpid()}\n")
    (log_tree / "sneaky" / "run.pid").symlink_to(secret / "pidfile")
    (log_tree / "sneaky" / "stderr.log").symlink_to(secret / "pidfile")
    (log_tree / "linked").symlink_to(secret)
    opened = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(os.path.realpath(file) if isinstance(file, (str, os.PathLike)) else file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    for path in ("/metrics", "/v1/runs", "/healthz", "/../secret/metrics.jsonl", "/metrics?f=../secret"):
        get(exporter, path)
    monkeypatch.setattr(builtins, "open", real_open)
    root = os.path.realpath(log_tree)
    outside = [p for p in opened if isinstance(p, str) and not p.startswith(root + os.sep)
               and not p.startswith("/proc/")]
    assert opened and outside == []
    assert b'"step": 99' not in get(exporter, "/v1/runs")[2]


def test_snapshot_cache_reuses_a_scan_within_its_ttl(log_tree):
    cache = SnapshotCache(log_tree, ttl=60)
    first = cache.get()
    assert cache.get() is first and cache.scans == 1
    cache.ttl = 0
    time.sleep(0.01)
    assert cache.get() is not first and cache.scans == 2


def test_serve_command_refuses_a_missing_root(tmp_path):
    from typer.testing import CliRunner

    from retrain.cli import app

    result = CliRunner().invoke(app, ["status", "serve", str(tmp_path / "nope"), "--port", "0"])
    assert result.exit_code == 2 and "No log directory found" in result.stderr
