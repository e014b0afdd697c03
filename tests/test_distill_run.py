"""On-policy distillation and reward models in real runs of the tiny model, in process.

- A teacher behind `retrain serve` (started here on 127.0.0.1, in this process: the model side
  and the HTTP app of the command) scores given tokens as a direct forward does, within 1e-4;
  one whose tokenizer is not the student's is refused naming both; a request it refuses stops
  the run with the server named; and a pure-distillation run (group size 1, no reward weight)
  trains on it, every group, tied or not.
- Distilling from a local teacher two batches ahead (`max_async_level = 2`) stops on Ctrl-C and
  resumes bit for bit.
- A reward model loaded here (a tiny random sequence classifier) scores two steps; one behind a
  server that fails is counted and stops the run at its error budget."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from serving import serve_in_process
from tiny_run import Messages, tiny_classifier, write_tiny_run

from retrain.io.layout import REWARD_MODEL_CACHE
from retrain.io.log import read_jsonl
from retrain.models.load import ModelSpec, load_model, load_tokenizer
from retrain.teacher.protocol import ScoreRow
from retrain.teacher.server import ServerTeacher, TeacherFailed
from retrain.teacher.tokens import TokenizerMismatch
from retrain.training.interrupt import RunInterrupted
from retrain.training.reward_faults import RewardErrorBudget
from retrain.training.telemetry import WALL_CLOCK_FIELDS
from retrain.training.trainers import train
from retrain.validation.load import load_config

TINY = ModelSpec("tiny")
KEY = "retrain-teacher-key"
ROWS = [ScoreRow([1, 5, 9, 11, 40, 41, 2], 3), ScoreRow([1, 7, 8, 30, 31, 32, 33, 34, 35, 36, 2], 4),
        ScoreRow([1, 60, 2], 1)]
DISTIL = {"temperature": 1.0, "top_p": 1.0}

# a graded reward that sends Ctrl-C to the process at the call SIGINT_AT_CALL names
GRADED = '''
import os, signal

calls = [0]

def score(response, reference):
    calls[0] += 1
    if str(calls[0]) == os.environ.get("SIGINT_AT_CALL"):
        os.kill(os.getpid(), signal.SIGINT)
    return min(1.0, sum(ch.isdigit() for ch in response) / 4)
'''


@pytest.fixture(scope="module")
def teacher_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("teacher-serve")
    with serve_in_process(root, '[model]\nmodel = "tiny"\n[backend]\ndevices = "cpu"\n[training]\nseed = 0\n',
                          api_key=KEY) as url:
        yield url


def direct(row: ScoreRow) -> list[float]:
    model = load_model(TINY, seed=0).eval()
    with torch.no_grad():
        lps = torch.log_softmax(model(input_ids=torch.tensor([row.tokens])).logits[0].float(), dim=-1)
    return [float(lps[j - 1, row.tokens[j]]) for j in range(row.start, len(row.tokens))]


def test_a_server_teachers_logprobs_are_a_direct_forwards_within_1e_4(teacher_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_TEST_TEACHER_KEY", KEY)
    teacher = ServerTeacher(teacher_url, "tiny", api_key_env="RETRAIN_TEST_TEACHER_KEY", batch_size=2)
    try:
        teacher.check_tokenizer(load_tokenizer(TINY), "tiny")
        got = teacher.score(ROWS)
        assert teacher.metrics()["teacher/requests"] == 2.0  # 3 rows, 2 a request
    finally:
        teacher.close()
    for row, lps in zip(ROWS, got, strict=True):
        want = direct(row)
        assert len(lps) == len(want) and max(abs(a - b) for a, b in zip(lps, want, strict=True)) < 1e-4, (lps, want)


def test_a_teacher_server_that_dies_between_steps_is_retried_then_stops_the_run(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_TEST_TEACHER_KEY", KEY)
    config = '[model]\nmodel = "tiny"\n[backend]\ndevices = "cpu"\n[training]\nseed = 0\n'
    with serve_in_process(tmp_path, config, api_key=KEY) as url:
        teacher = ServerTeacher(url, "tiny", api_key_env="RETRAIN_TEST_TEACHER_KEY", retries=2, timeout_s=5.0,
                                backoff_s=0.01)
        assert len(teacher.score(ROWS[:1])[0]) == len(ROWS[0].tokens) - ROWS[0].start  # a step scored
    try:  # the server is gone: the next step's request is refused at the socket
        with pytest.raises(TeacherFailed) as failed:
            teacher.score(ROWS[:1])
        assert teacher.metrics()["teacher/retries"] == 2.0  # a connection failure is retried
    finally:
        teacher.close()
    assert url in str(failed.value) and "could not be reached" in str(failed.value) and KEY not in str(failed.value)


def swapped_tokenizer(folder: Path) -> Any:
    """tiny's tokenizer with the ids of "1" and "2" swapped: the same text, other ids."""
    from transformers import AutoTokenizer

    tokenizer = load_tokenizer(TINY)
    tokenizer.save_pretrained(str(folder))
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    vocab["1"], vocab["2"] = vocab["2"], vocab["1"]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return AutoTokenizer.from_pretrained(str(folder))


def test_a_server_teacher_is_checked_and_its_refusals_stop_the_run(teacher_url: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_TEST_TEACHER_KEY", KEY)
    teacher = ServerTeacher(teacher_url, "tiny", api_key_env="RETRAIN_TEST_TEACHER_KEY")
    try:
        with pytest.raises(TokenizerMismatch, match=r"\[teacher\] model = 'tiny' and \[model\] model = 'other'"):
            teacher.check_tokenizer(swapped_tokenizer(tmp_path / "swapped"), "other")
    finally:
        teacher.close()
    keyless = ServerTeacher(teacher_url, "tiny", retries=3)
    try:
        with pytest.raises(TeacherFailed) as failed:
            keyless.score(ROWS)
        assert keyless.metrics()["teacher/requests"] == 1.0  # a refusal is not retried
    finally:
        keyless.close()
    assert teacher_url in str(failed.value) and "a teacher request the server refused: HTTP 401" in str(failed.value)
    assert KEY not in str(failed.value)


def run_config(root: Path, name: str, *, training: dict[str, object], teacher: dict[str, object] | None = None,
               reward: str = "") -> Any:
    """A tiny run in `root` (the working folder, on sys.path for its reward module)."""
    cfg = write_tiny_run(root, name, training=training, tables={"teacher": teacher} if teacher else None)
    if reward:
        cfg.write_text(cfg.read_text().replace('type = "custom"\ncustom_module = "toy_reward"', reward))
    return load_config(cfg, [], import_plugins=False).config


def test_pure_distillation_from_a_served_teacher_trains_every_group(teacher_url: str, in_root: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RETRAIN_TEST_TEACHER_KEY", KEY)
    teacher = {"model": "tiny", "url": teacher_url, "api_key_env": "RETRAIN_TEST_TEACHER_KEY", "reward_coef": 0.0}
    messages = Messages()
    # the student's LoRA (lr 1e-2) moves it away from the served base after the first update
    train(run_config(in_root, "served", training={"max_steps": 3, "group_size": 1, "batch_size": 4, **DISTIL},
                     teacher=teacher), messages)
    rows = read_jsonl(in_root / "served" / "logs" / "metrics.jsonl")
    assert [r["num_datums"] for r in rows] == [4, 4, 4]  # groups of one train on the teacher alone
    assert all(r["teacher/requests"] >= 1 and r["teacher/tokens"] == r["rl/completion_tokens"] for r in rows)
    assert abs(rows[0]["teacher/kl"]) < 1e-4  # the student starts as the teacher (LoRA B = 0)
    assert rows[2]["teacher/kl"] > 1e-3 and all(not r["skipped"] for r in rows)
    assert any(line.startswith("distilling from the teacher tiny at http://127.0.0.1:") for line in messages.lines)


@pytest.fixture
def in_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "graded.py").write_text(GRADED)
    for name in ("graded", "toy_reward"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    load_model(TINY, seed=5).save_pretrained(str(tmp_path / "teacher"))  # a teacher unlike the student
    return tmp_path


def ahead_config(root: Path, name: str) -> Any:
    return run_config(root, name, training={"max_steps": 5, "max_async_level": 2, "save_every": 2, **DISTIL},
                      teacher={"model": "tiny", "adapter": str(root / "teacher"), "kl_coef": 0.5},
                      reward='type = "custom"\ncustom_module = "graded"')


def steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row's deterministic fields: wall-clock ones and the engine's per-row counters (which
    the sampling thread's timing splits between rows) left out."""
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_FIELDS and not k.startswith("engine_")} for r in rows]


def test_distilling_two_batches_ahead_stops_on_ctrl_c_and_resumes_bit_for_bit(in_root: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    train(ahead_config(in_root, "whole"), Messages())
    whole = read_jsonl(in_root / "whole" / "logs" / "metrics.jsonl")
    assert [r["async/policy_lag"] for r in whole] == [0, 1, 2, 2, 2]
    assert all(r["teacher/kl"] != 0.0 and r["teacher/tokens"] > 0 for r in whole)  # another model's logprobs
    monkeypatch.setenv("SIGINT_AT_CALL", "20")  # in step 2's batch, scored while step 0 or 1 trains
    sys.modules.pop("graded", None)
    with pytest.raises(RunInterrupted):
        train(ahead_config(in_root, "cut"), Messages())
    logs = in_root / "cut" / "logs"
    cut = len(read_jsonl(logs / "metrics.jsonl"))
    assert 0 < cut < 5
    monkeypatch.delenv("SIGINT_AT_CALL")
    train(load_config(in_root / "cut.toml", ["--resume", str(logs)], import_plugins=False).config, Messages())
    assert steady(read_jsonl(logs / "metrics.jsonl")) == steady(whole)
    adapter = "adapters/final/adapter_model.safetensors"
    assert (in_root / "cut" / adapter).read_bytes() == (in_root / "whole" / adapter).read_bytes()


def test_a_reward_model_run_trains_two_steps(in_root: Path) -> None:
    rm = tiny_classifier(in_root / "rm")
    train(run_config(in_root, "rm-run", training={"max_steps": 2},
                     reward=f'type = "model"\nmodel = "{rm}"\nmodel_batch_size = 4'), Messages())
    logs = in_root / "rm-run" / "logs"
    rows = read_jsonl(logs / "metrics.jsonl")
    assert len(rows) == 2 and all(r["reward_errors"] == 0 and not r["skipped"] for r in rows)
    assert all(0.0 < r["mean_reward"] < 1.0 for r in rows)  # sigmoids of a random head's logits
    assert sum(r["reward_model/requests"] + r["reward_model/cache_hits"] for r in rows) >= 4
    assert len(read_jsonl(logs / REWARD_MODEL_CACHE)) > 0


def test_a_failing_reward_model_server_is_counted_and_stops_the_run(rm_server: Any, in_root: Path) -> None:
    rm_server.mode = "503"
    reward = (f'type = "model"\nmodel = "rm"\nmodel_url = "{rm_server.url}"\njudge_retries = 1\n'
              "max_error_steps = 2\nmax_error_share = 0.5")
    with pytest.raises(RewardErrorBudget) as stopped:
        train(run_config(in_root, "faulty", training={"max_steps": 5}, reward=reward), Messages())
    rows = read_jsonl(in_root / "faulty" / "logs" / "metrics.jsonl")
    assert len(rows) == 2 and all(r["reward_errors"] == 8 and r["reward_model/retries"] >= 1 for r in rows), rows
    assert "a reward model that could not be reached" in str(stopped.value) and stopped.value.exit_code == 3
    assert os.path.isdir(in_root / "faulty" / "adapters")


def test_a_multi_turn_episode_is_scored_at_its_sampled_tokens_only(tmp_path: Path) -> None:
    """Each segment's whole stream goes to the teacher; what comes back per completion is the
    teacher's logprob of each sampled token, in turn order, and nothing of the prompt's or the
    environment's tokens."""
    import numpy as np

    from retrain.backends.local.teacher import load_teacher
    from retrain.rollout.episode import Episode, Segment, Turn
    from retrain.rollout.group import Group, StepRollouts
    from retrain.training.distill import score_groups
    from retrain.types import Completion, Example

    cfg = tmp_path / "t.toml"
    cfg.write_text('[teacher]\nmodel = "tiny"\ndevice = "cpu"\nbatch_size = 2\n')
    teacher = load_teacher(load_config(cfg, [], import_plugins=False).config, student_tokenizer=load_tokenizer(TINY),
                           device=torch.device("cpu"), seed=0)
    first = Segment(prompt_ids=[1, 5, 6], turns=[Turn(token_ids=[20, 21], logprobs=[-1.0, -2.0]),
                                                  Turn(token_ids=[22], logprobs=[-3.0], observation=[40, 41])])
    second = Segment(prompt_ids=[1, 7], turns=[Turn(token_ids=[23, 24, 2], logprobs=[-1.5, -0.5, -0.1])])
    episode = Episode(segments=[first, second])
    plain = Completion(token_ids=[30, 31, 2], logprobs=[-2.0, -2.5, -0.2])
    groups = [Group(Example(prompt="p"), [1, 5, 6], [episode.completion()], ["t"], np.zeros(1), episodes=[episode]),
              Group(Example(prompt="q"), [1, 8], [plain], ["u"], np.zeros(1))]
    rollouts = StepRollouts(groups, 0.0, 0.0)
    score_groups(teacher, rollouts)
    streams = [(ScoreRow([1, 5, 6, 20, 21, 40, 41, 22], 3), [3, 4, 7]), (ScoreRow([1, 7, 23, 24, 2], 2), [2, 3, 4]),
               (ScoreRow([1, 8, 30, 31, 2], 2), [2, 3, 4])]
    want = []
    for row, sampled in streams:
        lps = direct_at(row.tokens)
        want.append([lps[j] for j in sampled])
    assert groups[0].teacher_logprobs is not None and groups[1].teacher_logprobs is not None
    got_episode, got_plain = groups[0].teacher_logprobs[0].tolist(), groups[1].teacher_logprobs[0].tolist()
    assert len(got_episode) == 6 and len(got_plain) == 3
    assert max(abs(a - b) for a, b in zip(got_episode, want[0] + want[1], strict=True)) < 1e-5
    assert max(abs(a - b) for a, b in zip(got_plain, want[2], strict=True)) < 1e-5
    student = [-1.0, -2.0, -3.0, -1.5, -0.5, -0.1, -2.0, -2.5, -0.2]
    mean_gap = float(np.mean(np.array(student) - np.array(got_episode + got_plain)))
    assert rollouts.teacher_metrics["teacher/kl"] == pytest.approx(mean_gap)
    assert rollouts.teacher_metrics["teacher/tokens"] == 9.0


def direct_at(tokens: list[int]) -> dict[int, float]:
    """log p(tokens[j] | tokens[:j]) under tiny (seed 0), by position j."""
    model = load_model(TINY, seed=0).eval()
    with torch.no_grad():
        lps = torch.log_softmax(model(input_ids=torch.tensor([tokens])).logits[0].float(), dim=-1)
    return {j: float(lps[j - 1, tokens[j]]) for j in range(1, len(tokens))}
