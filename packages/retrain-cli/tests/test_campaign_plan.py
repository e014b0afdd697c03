"""Campaign expansion, per-run configs, the manifest and the summary, without training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain.campaign.expand import Campaign, expand
from retrain.campaign.manifest import ManifestFile
from retrain.campaign.parse import parse_campaign
from retrain.campaign.summary import format_table, summarize
from retrain.errors import UserError
from retrain.evaluation.row import EvalRow
from retrain.training.faults import run_environ
from retrain.validation.load import load_config

CAMPAIGN = """
[campaign]
seeds = [1, 2]
max_steps = 3
[[campaign.conditions]]
advantage_mode = "grpo"
transform_mode = "none"
[[campaign.conditions]]
advantage_mode = "maxrl"
transform_mode = "delight"
lr = 5e-5
[campaign.conditions.transform_params]
delight_eta = 0.5
[backend.options]
train_microbatch_size = 2
[logging]
wandb_project = "proj"
"""


def plan(tmp_path: Path, text: str = CAMPAIGN, name: str = "camp.toml") -> Campaign:
    (tmp_path / name).write_text(text)
    loaded = load_config(tmp_path / name)
    assert loaded.source is not None
    return expand(parse_campaign(loaded.source, loaded), loaded.source)


def test_runs_get_their_own_dirs_and_full_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    c = plan(tmp_path)
    names = [r.name for r in c.runs]
    delight = "maxrl+delight~lr=5e-05,transform_params={'delight_eta': 0.5}"
    assert names[:2] == ["grpo+none_s1", "grpo+none_s2"] and names[2].startswith("maxrl+delight~lr=5e-05")
    assert c.dir == tmp_path / "logs" / "camp"  # log_dir left at its default: logs/<file stem>
    assert len({r.log_dir for r in c.runs}) == len({r.adapter_path for r in c.runs}) == 4
    run = c.runs[2]
    assert run.log_dir == c.dir / "runs" / run.name and run.adapter_path == c.dir / "adapters" / run.name
    assert run.condition.label == delight
    # the per-run TOML loads back to exactly the run's config, nested tables included
    path = tmp_path / "run.toml"
    path.write_text(run.toml)
    assert load_config(path).config == run.config
    cfg = run.config
    assert cfg.training.seed == 1 and cfg.training.max_steps == 3 and cfg.training.lr == 5e-5
    assert cfg.algorithm.transform_params == {"delight_eta": 0.5}
    assert cfg.backend.options["train_microbatch_size"] == 2 and "train_microbatch_size = 2" in run.toml
    assert "gradient_checkpointing" not in run.toml  # options at their defaults are not written
    assert cfg.logging.wandb_group == delight and cfg.logging.wandb_run_name == run.name
    assert cfg.logging.wandb_tags == f"{delight},seed1"


def test_log_dir_and_adapter_path_of_the_file_are_used(tmp_path: Path) -> None:
    text = CAMPAIGN + f'log_dir = "{tmp_path / "mine"}"\n[backend]\nadapter_path = "{tmp_path / "ad"}"\n'
    c = plan(tmp_path, text)
    assert c.dir == tmp_path / "mine" and c.runs[0].adapter_path == tmp_path / "ad" / "grpo+none_s1"


def test_manifest_refuses_a_changed_campaign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    c = plan(tmp_path)
    m = ManifestFile(c)
    m.save()
    m.started("grpo+none_s1")
    m.ended("grpo+none_s1", "failed", "boom")
    data = json.loads((c.dir / "manifest.json").read_text())
    entry = data["runs"][0]
    assert entry["status"] == "failed" and entry["returncode"] == 1 and entry["error"] == "boom"
    assert entry["attempts"] == 1 and data["num_runs"] == 4 and data["executor"] == "local"
    assert ManifestFile(plan(tmp_path)).resumed  # same file: resumable
    with pytest.raises(UserError, match=r"config changed: grpo\+none_s1, grpo\+none_s2"):
        ManifestFile(plan(tmp_path, CAMPAIGN.replace("max_steps = 3", "max_steps = 4")))
    with pytest.raises(UserError, match="new runs"):
        ManifestFile(plan(tmp_path, CAMPAIGN.replace("seeds = [1, 2]", "seeds = [1, 2, 3]")))


def write_run(folder: Path, rewards: list[float], pass1: float | None = None, final: bool = True) -> None:
    folder.mkdir(parents=True)
    rows = [{"step": 0, "phase": "sft", "loss": 1.0, "step_time_s": 1.0}]
    rows += [{"step": i, "mean_reward": r, "step_time_s": 0.5} for i, r in enumerate(rewards)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if pass1 is not None:
        evals = [EvalRow(step=s, k=4, examples=10, mean_reward=p, pass_at_1=p, pass_at_k=min(1.0, 2 * p), maj_at_k=None,
                         mean_tokens=3.0, truncated_share=0.0, wall_s=0.1).to_dict()
                 for s, p in ((0, 0.0), (len(rewards), pass1))]
        (folder / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    (folder / "trainer_state.json").write_text(json.dumps({"checkpoint_name": "final" if final else "x"}))


def test_summary_shows_held_out_evaluation_where_runs_have_it(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    c = plan(tmp_path)
    m = ManifestFile(c)
    for run, reward, pass1 in zip(c.runs, [0.2, 0.4, 0.6, 0.9], [0.1, 0.3, 0.5, None], strict=True):
        write_run(run.log_dir, [0.0, reward], pass1)
        m.entry(run.name).status = "finished"
    rows, finals = summarize(m.data)
    # one finished run did not evaluate: the headline is the reward, the held-out columns stay
    assert rows[0].metric == "mean_reward" and rows[0].mean == pytest.approx(0.3)
    assert rows[0].std == pytest.approx(0.1414213562) and rows[0].steps == 2 and rows[0].wall_time_s == 2.0
    assert rows[0].pass_at_1 is not None and rows[0].pass_at_1.mean == pytest.approx(0.2)
    assert rows[0].pass_at_k is not None and rows[0].pass_at_k.mean == pytest.approx(0.4) and rows[0].eval_k == 4
    assert rows[1].pass_at_1 is not None and rows[1].pass_at_1.n == 1 and rows[1].pass_at_1.mean == 0.5
    assert [f.eval_step for f in finals] == [2, 2, 2, None]
    table = format_table(rows)
    assert "held-out pass@1" in table and "held-out pass@4" in table
    assert "0.200 ± 0.141" in table and "0.500 ± 0.000 (1 of 2)" in table and "0.750 ± 0.212" in table
    m.entry(c.runs[3].name).status = "failed"
    rows, _ = summarize(m.data)
    assert rows[0].metric == "eval/pass@1" and rows[0].mean == pytest.approx(0.2)
    assert rows[1].finished == 1 and rows[1].std == 0.0 and rows[1].mean == 0.5
    assert "1/2" in format_table(rows) and "(1 of" not in format_table(rows)
    for run in c.runs:
        (run.log_dir / "eval.jsonl").unlink(missing_ok=True)
    table = format_table(summarize(m.data)[0])
    assert "held-out" not in table and "0.300 ± 0.141" in table


def test_crash_point_reaches_only_the_targeted_run() -> None:
    env = {"RETRAIN_CRASH_AT": "after_step@1", "RETRAIN_CRASH_RUN": "b_s1", "X": "1"}
    assert "RETRAIN_CRASH_AT" not in run_environ("a_s1", env) and run_environ("a_s1", env)["X"] == "1"
    assert run_environ("b_s1", env)["RETRAIN_CRASH_AT"] == "after_step@1"
    assert run_environ("a_s1", {"RETRAIN_CRASH_AT": "x@1"})["RETRAIN_CRASH_AT"] == "x@1"


def test_runs_on_tinker_share_one_throttle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = CAMPAIGN.replace("[backend.options]\ntrain_microbatch_size = 2\n", "[backend]\nbackend = 'tinker'\n")
    c = plan(tmp_path, text)
    assert {r.config.backend.throttle_dir for r in c.runs} == {str(c.dir / "tinker_throttle")}
    own = plan(tmp_path, text.replace("backend = 'tinker'\n", "backend = 'tinker'\nthrottle_dir = '/tmp/slots'\n"),
               "own.toml")
    assert {r.config.backend.throttle_dir for r in own.runs} == {"/tmp/slots"}
    assert {r.config.backend.throttle_dir for r in plan(tmp_path, CAMPAIGN, "local.toml").runs} == {""}
