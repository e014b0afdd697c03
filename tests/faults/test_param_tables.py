"""The free-form tables of `[algorithm]` are checked against what the config's algorithm reads:
a key nothing reads is refused with the file, line and key and a guess (exit 2, before
anything runs), from the file or from `--advantage-param` / `--transform-param`; a key another
built-in part reads is a warning naming it; a plugin that declares `param_keys` is held to
them, one that declares nothing gets its table as written. `retrain explain`, `retrain trace`
and a run refuse the same configs (`explain` passed a `delight_etaa` typo that the run refused)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from retrain.config.errors import ConfigError
from retrain.validation.load import load_config


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text("[model]\nmodel = \"tiny\"\n[backend]\ndevices = \"cpu\"\n" + text)
    return path


def refusals(path: Path, *flags: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, list(flags))
    return [i.render() for i in info.value.issues]


def test_an_unknown_key_in_each_table_is_refused_with_its_line_and_a_guess(tmp_path: Path) -> None:
    path = write(tmp_path, "[algorithm]\nadvantage_mode = \"maxrl\"\ntransform_mode = \"delight\"\n"
                           "[algorithm.transform_params]\ndelight_etaa = 2.0\n"
                           "[algorithm.advantage_params]\nbaseline = \"mean\"\n"
                           "[algorithm.params]\ntarget_kll = 0.1\n")
    errs = refusals(path)
    [typo] = [e for e in errs if "delight_etaa" in e]
    assert typo.startswith(f"{path}:9: [algorithm.transform_params] delight_etaa: unknown key, not read by "
                           "transform 'delight'") and "did you mean 'delight_eta'?" in typo, typo
    [baseline] = [e for e in errs if "baseline" in e]
    assert f"{path}:11: [algorithm.advantage_params] baseline: unknown key, not read by advantage mode 'maxrl'" \
        in baseline and "reads no key of this table" in baseline, baseline
    [kl] = [e for e in errs if "target_kll" in e]
    assert f"{path}:13: [algorithm.params] target_kll: unknown key, not read: nothing in this config reads" in kl


def test_keys_from_the_command_line_are_named_by_their_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    errs = refusals(path, "--advantage-param", "zzz=3", "--transform-param", "uncertainty_kindd=surprisal")
    assert any(e.startswith("--advantage-param zzz (command line): unknown key, not read by advantage mode "
                            "'maxrl'") for e in errs), errs
    [kind] = [e for e in errs if "uncertainty_kindd" in e]
    assert kind.startswith("--transform-param uncertainty_kindd (command line):") and "'uncertainty_kind'" in kind


def test_a_key_another_part_reads_warns_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "[algorithm]\ntransform_mode = \"gtpo\"\n[algorithm.transform_params]\ndelight_eta = 2.0\n"
                           "entropy_mask_rho = 0.2\n")
    warnings = [w.render() for w in load_config(path).warnings]
    [eta] = [w for w in warnings if "delight_eta" in w]
    assert "not read by transform 'gtpo'" in eta and "read by transform 'delight', 'delight_sepa' or 'hard_delight';" in eta
    [rho] = [w for w in warnings if "entropy_mask_rho" in w]
    assert "read by transform 'entropy_mask'" in rho


def test_what_recipes_and_the_discover_trainer_read_loads(tmp_path: Path) -> None:
    path = write(tmp_path, "[algorithm]\nalgorithm_mode = \"discover_entropic\"\n[algorithm.params]\ntarget_kl = 0.1\n"
                           "beta_max = 20.0\n[algorithm.params.transform_params]\nuncertainty_kind = \"surprisal\"\n")
    assert not [w for w in load_config(path).warnings if "[algorithm.params" in w.render()]
    path = write(tmp_path, "[algorithm]\nalgorithm_mode = \"maxrl_gtpo\"\n[algorithm.params.transform_params]\n"
                           "delight_etaa = 1.0\n", "d.toml")
    assert any("[algorithm.params.transform_params] delight_etaa: unknown key, not read by transform 'gtpo'" in e
               for e in refusals(path))


PLUGIN = '''
def declared(ctx):
    return [[0.0] * len(lp) for lp in ctx.logprobs]
declared.param_keys = ("scale", "floor")

def undeclared(ctx):
    return [[0.0] * len(lp) for lp in ctx.logprobs]
'''


def test_a_plugin_is_held_to_the_keys_it_declares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_credit.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_credit", raising=False)
    path = write(tmp_path, "[algorithm]\ntransform_mode = \"my_credit.declared\"\n[algorithm.transform_params]\n"
                           "scale = 2.0\nscal = 1.0\n")
    [err] = [e for e in refusals(path) if "scal:" in e]
    assert "not read by transform 'my_credit.declared'" in err and "did you mean 'scale'?" in err
    path = write(tmp_path, "[algorithm]\ntransform_mode = \"my_credit.undeclared\"\n[algorithm.transform_params]\n"
                           "anything = 1\n", "u.toml")
    assert load_config(path).config.algorithm.transform_params == {"anything": 1}


def test_explain_and_trace_refuse_what_the_run_refuses(tmp_path: Path) -> None:
    from tiny_run import retrain, write_tiny_run

    cfg = write_tiny_run(tmp_path, tables={"algorithm": {"transform_mode": "delight"},
                                           "algorithm.transform_params": {"delight_etaa": 2.0}})
    results = {cmd: retrain(cfg, *([cmd] if cmd else [])) for cmd in ("explain", "trace", "")}
    for cmd, res in results.items():
        assert res.returncode == 2, (cmd, res.stdout, res.stderr)
        assert "[algorithm.transform_params] delight_etaa: unknown key" in res.stderr, (cmd, res.stderr)
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "run" / "logs").exists()


ALGORITHM = '''
def mine(ctx):
    return [[0.0] * len(lp) for lp in ctx.logprobs]
mine.param_keys = ("temperature",)
'''


def test_an_algorithm_plugin_declares_the_keys_of_algorithm_params(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_algo.py").write_text(ALGORITHM)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_algo", raising=False)
    path = write(tmp_path, "[algorithm]\nalgorithm_mode = \"my_algo.mine\"\n[algorithm.params]\ntemperature = 0.5\n"
                           "uncertainty_kind = \"surprisal\"\n[algorithm.params.transform_params]\nits_own = 1\n"
                           "[algorithm.advantage_params]\nalso_its_own = 2\n")
    loaded = load_config(path)
    assert loaded.config.algorithm.params["temperature"] == 0.5
    path = write(tmp_path, "[algorithm]\nalgorithm_mode = \"my_algo.mine\"\n[algorithm.params]\ntemperatur = 0.5\n",
                 "t.toml")
    [err] = refusals(path)
    assert "[algorithm.params] temperatur: unknown key, not read by algorithm plugin 'my_algo.mine'" in err
    assert "did you mean 'temperature'?" in err
