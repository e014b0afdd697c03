"""Real campaigns of the tiny model through the `retrain` command: 2 conditions x 2 seeds in
parallel worker processes; the same campaign SIGKILLed mid-way (driver and workers at once)
and resumed; a failing run among good ones; the Ray executor on a local instance with one
worker killed mid-run; and LoRA-Squeeze on an adapter the campaign trained."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrain.io.log import read_jsonl
from retrain.training.telemetry import WALL_CLOCK_FIELDS

pytestmark = pytest.mark.slow

RUNS = ["grpo+none_s1", "grpo+none_s2", "maxrl+gtpo_s1", "maxrl+gtpo_s2"]
REWARD = '''
def score(response, reference):
    return float(sum(ch.isdigit() for ch in response) >= 2)


def bad_data(config):
    raise RuntimeError("data exploded")
'''


def write_campaign(root: Path, campaign: str = "", conditions: str = "") -> Path:
    (root / "toy_reward.py").write_text(REWARD)
    conditions = conditions or """
[[campaign.conditions]]
advantage_mode = "grpo"
transform_mode = "none"
[[campaign.conditions]]
advantage_mode = "maxrl"
transform_mode = "gtpo"
"""
    cfg = root / "campaign.toml"
    cfg.write_text(f"""
[campaign]
seeds = [1, 2]
max_steps = 4
parallel = true
max_workers = 2
{campaign}
{conditions}
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
[backend.options]
train_microbatch_size = 4
[training]
batch_size = 2
group_size = 4
max_tokens = 8
temperature = 1.0
lr = 1e-2
save_every = 2
[data]
source = "arithmetic"
[reward]
type = "custom"
custom_module = "toy_reward"
custom_function = "score"
[logging]
log_dir = "{root / 'camp'}"
""")
    return cfg


def retrain(cfg: Path, *args: str, env: dict[str, str] | None = None,
            new_session: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retrain.cli", *args, str(cfg)], cwd=cfg.parent,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, capture_output=True,
                          text=True, timeout=900, check=False, start_new_session=new_session)


def run_outputs(run_dir: Path, adapter: Path) -> dict[str, Any]:
    def clean(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS} for r in rows]

    return {"metrics": clean(read_jsonl(run_dir / "metrics.jsonl")),
            "generations": read_jsonl(run_dir / "emergence" / "generations.jsonl"),
            "adapter": (adapter / "final" / "adapter_model.safetensors").read_bytes()}


def outputs(camp: Path) -> dict[str, dict[str, Any]]:
    return {name: run_outputs(camp / "runs" / name, camp / "adapters" / name) for name in RUNS}


def manifest(camp: Path) -> dict[str, Any]:
    return json.loads((camp / "manifest.json").read_text())


@pytest.fixture(scope="session")
def campaign(build_once) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The uninterrupted campaign, built once per session (shared by the xdist workers)."""

    def run(root: Path) -> None:
        res = retrain(write_campaign(root))
        (root / "stdout.log").write_text(res.stdout)
        (root / "stderr.log").write_text(res.stderr)
        assert res.returncode == 0, res.stderr

    root = build_once("campaign-uninterrupted", run)
    return {"root": root, "camp": root / "camp", "stdout": (root / "stdout.log").read_text(),
            "stderr": (root / "stderr.log").read_text(), "outputs": outputs(root / "camp")}


def test_campaign_writes_every_run(campaign: dict[str, Any]) -> None:
    camp = campaign["camp"]
    data = manifest(camp)
    assert [r["run_name"] for r in data["runs"]] == RUNS
    assert {r["status"] for r in data["runs"]} == {"finished"} and {r["returncode"] for r in data["runs"]} == {0}
    assert data["conditions"] == ["grpo+none", "maxrl+gtpo"] and data["num_runs"] == 4
    for name in RUNS:
        run = camp / "runs" / name
        state = json.loads((run / "trainer_state.json").read_text())
        assert state["checkpoint_name"] == "final" and state["step"] == 3, name
        meta = json.loads((run / "run_meta.json").read_text())
        assert meta["status"] == "succeeded" and meta["seed"] == int(name[-1])
        # nested tables reach the worker processes (the reference dropped them in parallel mode)
        assert meta["config"]["backend_options"]["train_microbatch_size"] == 4
        assert {r["condition"] for r in read_jsonl(run / "metrics.jsonl")} == {name[:-3]}
        assert sorted(p.name for p in (camp / "adapters" / name).iterdir()) == [
            "checkpoint_step_2", "checkpoint_step_4", "final", "run_owner.json"]
    adapters = [o["adapter"] for o in campaign["outputs"].values()]
    assert len(set(adapters)) == 4, "two runs share an adapter"
    assert "± " in campaign["stdout"] and "grpo+none" in campaign["stdout"] and "2/2" in campaign["stdout"]
    summary = json.loads((camp / "campaign_summary.json").read_text())
    assert [c["finished"] for c in summary["conditions"]] == [2, 2]
    finals = {r["name"]: r["reward"] for r in summary["runs"]}
    for name in RUNS:
        last = [r for r in read_jsonl(camp / "runs" / name / "metrics.jsonl")][-1]
        assert finals[name] == last["mean_reward"]
    grpo = [finals["grpo+none_s1"], finals["grpo+none_s2"]]
    assert summary["conditions"][0]["mean"] == pytest.approx(np.mean(grpo))
    assert summary["conditions"][0]["std"] == pytest.approx(np.std(grpo, ddof=1))


def test_status_and_diff_read_the_campaign(campaign: dict[str, Any]) -> None:
    root = campaign["root"]
    res = retrain(root / "camp", "status", "--json")
    report = json.loads(res.stdout)
    (summary,) = report["campaigns"]
    assert summary["status"] == "done" and summary["completed"] == 4 and summary["failed"] == 0
    assert set(summary["matrix"]) == {"grpo+none", "maxrl+gtpo"}
    res = subprocess.run([sys.executable, "-m", "retrain.cli", "diff", str(root / "camp"), "grpo+none", "maxrl+gtpo",
                          "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    diff = json.loads(res.stdout)
    assert diff["runs_a"] == 2 and diff["steps_a"] == 4 and diff["label_b"] == "maxrl+gtpo"


def test_sigkill_mid_campaign_then_resume(campaign: dict[str, Any], tmp_path: Path) -> None:
    """The last run is killed just after its checkpoint at step 2, taking the driver and the
    other worker with it; `retrain campaign.toml` again leaves finished runs untouched and
    resumes the others, ending bit-identical to the uninterrupted campaign."""
    cfg = write_campaign(tmp_path)
    killed = retrain(cfg, env={"RETRAIN_CRASH_AT": "after_checkpoint@1", "RETRAIN_CRASH_RUN": RUNS[-1],
                               "RETRAIN_CRASH_GROUP": "1"}, new_session=True)
    assert killed.returncode == -9, killed.stderr
    camp = tmp_path / "camp"
    entries = {r["run_name"]: r for r in manifest(camp)["runs"]}
    assert entries[RUNS[-1]]["status"] == "running"
    # the other worker's run may be killed before it wrote any state (the machine's load decides)
    states = {n: camp / "runs" / n / "trainer_state.json" for n in RUNS}
    done = [n for n, p in states.items() if p.exists() and json.loads(p.read_text()).get("checkpoint_name") == "final"]
    assert {"grpo+none_s1", "grpo+none_s2"} <= set(done) and RUNS[-1] not in done
    untouched = {p: p.stat().st_mtime_ns for n in done for base in (camp / "runs", camp / "adapters")
                 for p in (base / n).rglob("*")}
    resumed = retrain(cfg)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done)} of 4 runs already finished" in resumed.stderr
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched
    # the worker's own report (stdout) says where it resumed from
    report = (camp / "runs" / RUNS[-1] / "stdout.log").read_text()
    assert "resuming from" in report and "checkpoint_step_2" in report
    assert outputs(camp) == campaign["outputs"]
    assert all(r["status"] == "finished" for r in manifest(camp)["runs"])


def test_failed_run_is_marked_and_the_others_go_on(tmp_path: Path) -> None:
    """One condition's data source raises: its run is marked failed with the error, the
    other run finishes and the campaign exits 1 naming the failed run. The summary carries
    the finished run's held-out evaluation, and [squeeze] analyses its adapter."""
    cfg = write_campaign(tmp_path, campaign="parallel = false\nseeds = [1]\nmax_steps = 1", conditions="""
[[campaign.conditions]]
advantage_mode = "grpo"
transform_mode = "none"
data_source = "toy_reward.bad_data"
[[campaign.conditions]]
advantage_mode = "grpo"
transform_mode = "none"
""")
    text = cfg.read_text().replace("seeds = [1, 2]\nmax_steps = 4\nparallel = true\n", "")
    (tmp_path / "held_out.jsonl").write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "reference": str(2 * a)}) + "\n"
                                                     for a in (11, 23, 35, 47)))
    cfg.write_text(text + f'\n[eval]\nat_end = true\nk = 2\ndata_path = "{tmp_path / "held_out.jsonl"}"\n'
                   "[squeeze]\nmin_variance_retention = 0.9\n")
    res = retrain(cfg)
    assert res.returncode == 1, res.stderr
    bad = "grpo+none~data_source=toy_reward.bad_data_s1"
    assert f"1 of 2 runs failed: {bad} (exception:" in res.stderr and "data exploded" in res.stderr
    entries = {r["run_name"]: r for r in manifest(tmp_path / "camp")["runs"]}
    assert entries[bad]["status"] == "failed" and entries[bad]["returncode"] == 1
    assert "data exploded" in entries[bad]["error"]
    assert entries["grpo+none_s1"]["status"] == "finished"
    status = json.loads(retrain(tmp_path / "camp", "status", "--json").stdout)["campaigns"][0]
    assert status["failed"] == 1 and status["completed"] == 1
    # the summary carries the held-out evaluation of the run that finished
    (last,) = read_jsonl(tmp_path / "camp" / "runs" / "grpo+none_s1" / "eval.jsonl")
    row = json.loads((tmp_path / "camp" / "campaign_summary.json").read_text())["conditions"][1]
    assert row["metric"] == "eval/pass@1" and row["eval_k"] == 2 and last["step"] == 1
    assert row["pass_at_1"] == {"mean": last["eval/pass@1"], "std": 0.0, "n": 1}
    assert row["pass_at_k"]["mean"] == last["eval/pass@2"]
    assert "held-out pass@1" in res.stdout and "held-out pass@2" in res.stdout
    # [squeeze] in a campaign file: the rank table of the first finished run's adapter
    squeeze = manifest(tmp_path / "camp")["squeeze"]
    assert squeeze["run"] == "grpo+none_s1" and squeeze["source_rank"] == 4
    assert [r["rank"] for r in squeeze["ranks"]] == [1, 2, 4] and squeeze["ranks"][-1]["mean"] == pytest.approx(1.0)
    assert f"recommended rank: {squeeze['recommended_rank']}" in res.stderr


def test_ray_executor_matches_local_and_survives_a_killed_worker(campaign: dict[str, Any], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The same campaign as Ray tasks on a local instance this test starts: the results equal
    the local executor's; one run's worker SIGKILLs itself after its step-2 checkpoint, and the
    retried task resumes it from that checkpoint."""
    from retrain.campaign.cluster import UV_HOOK
    from retrain.cli import main

    # as the executor does: under `uv run` Ray would otherwise zip the cwd for every worker
    monkeypatch.setenv(UV_HOOK, "0")
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray._private.ray_constants, UV_HOOK, False)  # when Ray was imported before

    cfg = write_campaign(tmp_path, campaign='executor = "ray"\nnum_cpus = 1\nmax_retries = 1')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RETRAIN_CRASH_AT", "after_checkpoint@1")
    monkeypatch.setenv("RETRAIN_CRASH_RUN", RUNS[1])
    with local_ray(ray, monkeypatch, num_cpus=2, include_dashboard=False, object_store_memory=80 << 20,
                   log_to_driver=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}}):
        with pytest.raises(SystemExit) as exit_:
            main([str(cfg)])
        assert exit_.value.code in (0, None)
    camp = tmp_path / "camp"
    entries = {r["run_name"]: r for r in manifest(camp)["runs"]}
    assert entries[RUNS[1]]["attempts"] == 2 and entries[RUNS[0]]["attempts"] == 1
    assert all(e["status"] == "finished" for e in entries.values())
    assert outputs(camp) == campaign["outputs"]


# Ray waits 30 s (hard-coded) for the head's raylet to register and about 30 s for its GCS:
# on a loaded 2-core machine (two test workers, each training) both can take minutes.
RAY_START_S = 240


@contextlib.contextmanager
def local_ray(ray: Any, monkeypatch: pytest.MonkeyPatch, **init: Any) -> Iterator[None]:
    """A local Ray instance for the block: started with waits that fit a loaded 2-core machine,
    and always shut down, even when it fails to start; any process its start left behind (a
    GCS or raylet of a head that timed out, a worker) is killed on the way out."""
    import psutil

    services = ray._private.services
    get_node = services.get_node

    def patient_get_node(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + RAY_START_S
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:  # the raylet has not registered yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    monkeypatch.setattr(services, "get_node", patient_get_node)
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", str(RAY_START_S))
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    # Ray's plasma socket lives under _temp_dir, and a pytest tmp_path (deeper still under
    # xdist) overruns the 107-byte limit of a Unix socket path
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    try:
        ray.init(_temp_dir=temp_dir, **init)
        yield
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        left = [p for p in me.children(recursive=True) if p.pid not in before]
        _, alive = psutil.wait_procs(left, timeout=15)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(alive, timeout=10)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_squeeze_of_a_trained_adapter(campaign: dict[str, Any], tmp_path: Path) -> None:
    """The rank table equals a direct SVD of each module's ΔW = scale·B·A. The adapter squeezed
    to rank 2 loads in PEFT and gives the logits of the base model plus each ΔW's best rank-2
    approximation (computed here with torch.linalg.svd) to 1e-5; squeezed to its own rank it
    gives the original adapter's logits to 1e-5. What rank 2 leaves out of the update is a real
    change (measured in docs/squeeze.md), smaller than the whole update's."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    from retrain.config.schema import SqueezeConfig
    from retrain.models.load import ModelSpec, load_model
    from retrain.squeeze.run import analyse, squeeze_to

    adapter = campaign["camp"] / "adapters" / RUNS[2] / "final"
    out = tmp_path / "squeezed"
    cfg = tmp_path / "squeeze.toml"
    cfg.write_text(f'[squeeze]\nadapter_path = "{adapter}"\nmin_variance_retention = 0.9\n'
                   f'output_path = "{out}"\ncompress_to = 2\n')
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    config = json.loads((adapter / "adapter_config.json").read_text())
    rank, scale = config["r"], config["lora_alpha"] / config["r"]
    modules = sorted(k.split(".lora_A.")[0] for k in tensors if ".lora_A." in k)
    svds = {m: torch.linalg.svd(tensors[f"{m}.lora_B.weight"].double() @ tensors[f"{m}.lora_A.weight"].double())
            for m in modules}  # ΔW / scale: out x in
    ranks = (1, 2, 4)
    mean = [float(np.mean([float((s[:k] ** 2).sum() / (s**2).sum()) for _, s, _ in svds.values()])) for k in ranks]
    expect = next((k for k, v in zip(ranks, mean, strict=True) if v >= 0.9), rank)
    table = {int(line.split()[0]): line for line in res.stdout.splitlines() if line.strip()[:1].isdigit()}
    for k, v in zip(ranks, mean, strict=True):
        assert table[k].split()[1] == f"{100 * v:.2f}", (k, table[k])
    assert "<--" in table[expect] and f"recommended rank: {expect}" in res.stdout
    squeezed = json.loads((out / "adapter_config.json").read_text())
    assert squeezed["r"] == 2 and squeezed["lora_alpha"] / 2 == pytest.approx(scale)
    full = squeeze_to(analyse(adapter, SqueezeConfig(adapter_path=str(adapter))), rank, tmp_path / "full")
    ids = torch.tensor([[3, 5, 7, 11, 13, 2, 4, 6]])

    def logits(folder: Path | None) -> torch.Tensor:
        model = load_model(ModelSpec("tiny"), seed=0)
        return (PeftModel.from_pretrained(model, str(folder)) if folder else model)(ids).logits

    with torch.no_grad():
        base, original, got, lossless = logits(None), logits(adapter), logits(out), logits(full)
        direct = load_model(ModelSpec("tiny"), seed=0)
        for m, (u, s, vh) in svds.items():
            layer = direct.get_submodule(m.removeprefix("base_model.model."))
            layer.weight += (scale * (u[:, :2] * s[:2]) @ vh[:2]).to(layer.weight.dtype)
        want = direct(ids).logits
    assert (got - want).abs().max().item() < 1e-5
    assert (lossless - original).abs().max().item() < 1e-5
    assert (got - original).abs().max().item() < (original - base).abs().max().item()
