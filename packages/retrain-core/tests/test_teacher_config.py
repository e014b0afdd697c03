"""`[teacher]` and `[reward] type = "model"` at load: what is refused by name (a backend that
cannot load a teacher, TL-GRPO, a server teacher's adapter, a trainer that is not RL), what is
warned about (keys of a feature left off, a tempered sampler), and the advantage term itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrain.advantages.teacher import Distill, teacher_advantages
from retrain.config import ConfigError
from retrain.validation.load import load_config

NOT_BUILT = "not built yet in this version"


def errors_of(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "c.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(p)
    return [i.render() for i in info.value.issues]


def warnings_of(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "w.toml"
    p.write_text(text)
    return [w.render() for w in load_config(p).warnings]


def test_a_local_and_a_server_teacher_load(tmp_path: Path) -> None:
    p = tmp_path / "ok.toml"
    p.write_text('[teacher]\nmodel = "tiny"\nreward_coef = 0.0\nkl_coef = 0.5\n[training]\ngroup_size = 1\n'
                 'temperature = 1.0\ntop_p = 1.0\n')
    c = load_config(p).config
    assert c.teacher.enabled and c.teacher.reward_coef == 0.0 and c.training.group_size == 1
    p.write_text('[teacher]\nmodel = "served"\nurl = "http://127.0.0.1:8000/v1"\napi_key_env = "K"\n'
                 '[backend]\nbackend = "tinker"\n[training]\ntemperature = 1.0\ntop_p = 1.0\n')
    assert load_config(p).config.teacher.url.endswith("/v1")


@pytest.mark.parametrize(("text", "key", "needle"), [
    ('[backend]\nbackend = "tinker"\n[teacher]\nmodel = "Qwen/Qwen3-4B"\n', "[teacher] model",
     f"a teacher loaded beside the student on backend 'tinker' is {NOT_BUILT}"),
    ('[teacher]\nmodel = "tiny"\n[training]\ntl_grpo = true\n', "[training] tl_grpo", NOT_BUILT),
    ('[teacher]\nmodel = "m"\nurl = "http://127.0.0.1:8000/v1"\nadapter = "a"\n', "[teacher] adapter",
     "the server's to load"),
    ('[teacher]\nurl = "http://127.0.0.1:8000/v1"\n', "[teacher] model", "must name the model the server serves"),
    ('[teacher]\nmodel = "m"\nurl = "127.0.0.1:8000"\n', "[teacher] url", "http:// or https://"),
    ('[teacher]\nmodel = "tiny"\n[training]\ntrainer = "sft"\n', "[teacher] model", "RL trainer"),
    ('[teacher]\nmodel = "tiny"\nkl_coef = 0.0\n', "[teacher] kl_coef", "> 0"),
    ('[reward]\ntype = "model"\n', "[reward] model", "needs the reward model"),
    ('[reward]\ntype = "model"\nmodel = "rm"\nmodel_template = "{prompt}"\n', "[reward] model_template",
     "{response}"),
])
def test_what_cannot_run_is_refused_by_name(tmp_path: Path, text: str, key: str, needle: str) -> None:
    errs = errors_of(tmp_path, text)
    assert any(f"{key}:" in e and needle in e for e in errs), errs


def test_keys_of_a_feature_left_off_are_warned_about(tmp_path: Path) -> None:
    warned = warnings_of(tmp_path, '[teacher]\nkl_coef = 2.0\n[reward]\nmodel_batch_size = 4\n')
    assert any("[teacher] kl_coef: not read: there is no teacher" in w for w in warned), warned
    assert any("[reward] model_batch_size: not read" in w for w in warned), warned
    warned = warnings_of(tmp_path, '[teacher]\nmodel = "tiny"\ntimeout_s = 5.0\n')
    assert any("[teacher] timeout_s: not read: the teacher is loaded here" in w for w in warned), warned
    # the default sampler (temperature 0.7, top_p 0.95) tempers what the teacher's term compares
    assert any("[training] temperature" in w and "tempered" in w for w in warned), warned
    quiet = warnings_of(tmp_path, '[teacher]\nmodel = "tiny"\n[training]\ntemperature = 1.0\ntop_p = 1.0\n'
                                  'save_every = 10\n[backend]\ndevices = "cpu"\n')
    assert not any("teacher" in w or "temperature" in w for w in quiet), quiet


def test_the_term_is_kl_coef_times_the_logprob_gap_beside_the_weighted_task_advantage() -> None:
    adv = [np.array([0.5, 0.5, 0.5]), np.array([-1.0])]
    student = [[-1.0, -2.0, -0.5], [-3.0]]
    teacher = [[-1.5, -0.5, -0.5], [-1.0]]
    out, metrics = teacher_advantages(adv, student, teacher, Distill(kl_coef=2.0, reward_coef=0.5))
    assert out[0].tolist() == [0.25 - 1.0, 0.25 + 3.0, 0.25] and out[1].tolist() == [-0.5 + 4.0]
    assert metrics["teacher/adv_mean"] == pytest.approx((-1.0 + 3.0 + 0.0 + 4.0) / 4)
    pure, _ = teacher_advantages(adv, student, teacher, Distill(kl_coef=1.0, reward_coef=0.0))
    assert pure[1].tolist() == [2.0]
    with pytest.raises(ValueError, match="one per sampled token"):
        teacher_advantages(adv, student, [[-1.0], [-1.0]], Distill(1.0, 1.0))
