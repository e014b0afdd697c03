"""End to end: a real Prometheus server scrapes the exporter on loopback, and the scraped
series are read back through Prometheus's HTTP query API.

CI installs the Debian `prometheus` package (scripts/ci/install-prometheus.sh); the test is
skipped only where the binary is absent.
"""

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from retrain.status.export.server import make_server, serve_in_thread

PROMETHEUS = shutil.which("prometheus")
CAMPAIGN = "campaign_20260101_000000"

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the `prometheus` binary is not installed (scripts/ci/install-prometheus.sh installs it)",
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port, promql):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        data = json.load(resp)
    assert data["status"] == "success"
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["data"]["result"]}


def wait_for(port, promql, want, deadline):
    last = None
    while time.monotonic() < deadline:
        try:
            last = query(port, promql)
            if len(last) >= want:
                return last
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    pytest.fail(f"Prometheus did not return {want} series for {promql!r} in time (last: {last!r})")


def by_run(result):
    return {dict(labels)["run"]: v for labels, v in result.items()}


@pytest.mark.timeout(90)
def test_prometheus_scrapes_the_exporter(log_tree, tmp_path):
    exporter = make_server(log_tree, "127.0.0.1", 0, ttl=0.5)
    serve_in_thread(exporter)
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: retrain\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter.server_address[1]}']\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        steps = by_run(wait_for(prom_port, 'retrain_run_step{job="retrain"}', 8, deadline))
        assert steps["live"] == 6 and steps["done"] == 3 and steps["nested/torn"] == 2
        assert steps[f"{CAMPAIGN}/runs/grpo+none_s42"] == 9

        up = wait_for(prom_port, 'up{job="retrain"}', 1, deadline)
        assert list(up.values()) == [1.0]

        reward = by_run(query(prom_port, "retrain_run_mean_reward"))
        assert reward["live"] == pytest.approx(0.16)
        tokens = by_run(query(prom_port, "retrain_run_tokens_per_second"))
        assert tokens["done"] == 1003
        assert by_run(query(prom_port, 'retrain_run_state{state="dead"} == 1')) == {"crashed": 1.0}
        assert set(by_run(query(prom_port, 'retrain_run_state{state="stale"} == 1'))) == {"sleepy"}
        stamps = by_run(query(prom_port, "retrain_run_last_step_timestamp_seconds"))
        assert abs(stamps["live"] - time.time()) < 300

        failed = query(prom_port, f'retrain_campaign_runs{{campaign="{CAMPAIGN}",state="failed"}}')
        assert list(failed.values()) == [1.0]
        assert list(query(prom_port, 'retrain_campaigns{status="running"}').values()) == [1.0]
        by_condition = query(prom_port, "count by (condition) (retrain_run_step{campaign!=''})")
        assert {dict(k)["condition"]: v for k, v in by_condition.items()} == {"grpo+none": 2, "maxrl+gtpo": 1}
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
        exporter.shutdown()
        exporter.server_close()
