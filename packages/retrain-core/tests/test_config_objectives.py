"""The objectives' keys: `[training] policy_loss_mode` cispo and sapo with their parameters,
`importance_sampling_level`, `[inference] importance_sampling_mode`; what each backend computes
(catalog capabilities), the clip band every backend shares, and a truncating sampler with a loss
that reads the policy ratio: live where the trainer scores tokens under the sampler's truncation
(the local backend's in-process engine), refused in one line naming both keys elsewhere (an
inference server, a remote service)."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain.backends.catalog import _parse_capabilities, definition_of
from retrain.backends.objective import clip_band
from retrain.config import ConfigError
from retrain.config.schema import POLICY_LOSS_MODES, RATIO_LEVELS
from retrain.validation.load import load_config

NOT_BUILT_TEXT = "not built yet in this version"
UNTRUNCATED = "[training]\ntop_p = 1.0\n"


def load(tmp_path: Path, text: str, *flags: str):  # type: ignore[no-untyped-def]
    p = tmp_path / "c.toml"
    p.write_text(text)
    return load_config(p, list(flags))


def errors_of(tmp_path: Path, text: str, *flags: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, *flags)
    return [i.render() for i in info.value.issues]


def warnings_of(tmp_path: Path, text: str, *flags: str) -> list[str]:
    return [w.render() for w in load(tmp_path, text, *flags).warnings]


def test_the_new_keys_load_and_are_live(tmp_path: Path) -> None:
    c = load(tmp_path, UNTRUNCATED + "policy_loss_mode = 'sapo'\nimportance_sampling_level = 'sequence'\n"
             "sapo_temperature_pos = 0.5\nsapo_temperature_neg = 2.0\nloss_aggregation = 'seq_mean_token_mean'\n"
             "[inference]\nimportance_sampling_correction = true\nimportance_sampling_mode = 'sequence_mask'\n")
    t = c.config.training
    assert (t.policy_loss_mode, t.importance_sampling_level, t.sapo_temperature_pos, t.sapo_temperature_neg) == \
        ("sapo", "sequence", 0.5, 2.0)
    assert c.config.inference.importance_sampling_mode == "sequence_mask"
    assert not [w for w in c.warnings if "sapo" in w.render() or "importance_sampling" in w.render()]
    defaults = load(tmp_path, "").config
    assert defaults.training.importance_sampling_level == "token"
    assert defaults.inference.importance_sampling_mode == "token_truncate"


@pytest.mark.parametrize("text,label,needle", [
    ("policy_loss_mode = 'gspo'\n", "[training] policy_loss_mode", "cispo, sapo"),
    ("importance_sampling_level = 'group'\n", "[training] importance_sampling_level", "token, sequence"),
    ("sapo_temperature_neg = 0\n", "[training] sapo_temperature_neg", "must be > 0"),
])
def test_bad_values_name_the_key(tmp_path: Path, text: str, label: str, needle: str) -> None:
    errs = errors_of(tmp_path, UNTRUNCATED + text)
    assert len(errs) == 1 and label in errs[0] and needle in errs[0], errs
    errs = errors_of(tmp_path, "[inference]\nimportance_sampling_mode = 'token_clip'\n")
    assert "[inference] importance_sampling_mode" in errs[0] and "sequence_mask" in errs[0]


def test_cispo_alone_caps_its_weight_at_five_with_no_lower_bound(tmp_path: Path) -> None:
    """`policy_loss_mode = "cispo"` alone loads: the cap ScaleRL and TRL's recommendation use, 5."""
    alone = load(tmp_path, UNTRUNCATED + "policy_loss_mode = 'cispo'\n")
    assert clip_band("cispo", alone.config.training.clip_eps, alone.config.training.clip_eps_high) == (0.0, 5.0)
    assert not [w for w in alone.warnings if "clip_eps" in w.render()]
    c = load(tmp_path, UNTRUNCATED + "policy_loss_mode = 'cispo'\nclip_eps_high = 3.0\n").config
    assert clip_band("cispo", c.training.clip_eps, c.training.clip_eps_high) == (0.0, 4.0)
    # standard keeps its rule: an upper clip alone is a mistake there
    assert "needs clip_eps > 0" in errors_of(tmp_path, UNTRUNCATED + "clip_eps_high = 0.3\n")[0]


def test_the_clip_band_of_each_mode() -> None:
    assert clip_band("standard", 0.0, 0.0) is None
    assert clip_band("standard", 0.2, 0.0) == pytest.approx((0.8, 1.2))
    assert clip_band("standard", 0.2, 0.28) == pytest.approx((0.8, 1.28))
    assert clip_band("clip_cov", 0.0, 0.0) == (0.0, 2.0)
    assert clip_band("cispo", 0.2, 0.0) == pytest.approx((0.8, 1.2))
    assert clip_band("cispo", 0.0, 0.0) == (0.0, 5.0)
    assert clip_band("sapo", 0.2, 0.2) is None and clip_band("kl_cov", 0.2, 0.0) is None


@pytest.mark.parametrize("mode", ["kl_cov", "clip_cov"])
def test_sequence_ratios_with_token_selection_are_refused(tmp_path: Path, mode: str) -> None:
    errs = errors_of(tmp_path, UNTRUNCATED + f"policy_loss_mode = '{mode}'\nimportance_sampling_level = 'sequence'\n")
    assert len(errs) == 1 and "[training] importance_sampling_level" in errs[0] and NOT_BUILT_TEXT in errs[0], errs


def test_each_backend_lists_the_objectives_it_computes() -> None:
    for name in ("local", "unsloth"):
        caps = definition_of(name).capabilities
        assert caps.policy_losses == POLICY_LOSS_MODES and caps.ratio_levels == RATIO_LEVELS
    tinker = definition_of("tinker").capabilities
    assert tinker.policy_losses == ("standard", "cispo") and tinker.ratio_levels == ("token",)
    assert tinker.as_dict()["policy_losses"] == ["standard", "cispo"]
    plugin = _parse_capabilities({"reports_sync_loss": True, "preserves_token_advantages": True,
                                  "supports_checkpoint_resume": False, "resume_runtime_dependent": False})
    assert plugin is not None and plugin.policy_losses == ("standard",) and plugin.ratio_levels == ("token",)
    declared = _parse_capabilities({"reports_sync_loss": True, "preserves_token_advantages": True,
                                    "supports_checkpoint_resume": False, "resume_runtime_dependent": False,
                                    "policy_losses": ["standard", "sapo"], "ratio_levels": ["token", "sequence"]})
    assert declared is not None and declared.policy_losses == ("standard", "sapo")


TINKER = "[backend]\nbackend = 'tinker'\n" + UNTRUNCATED


@pytest.mark.parametrize("text,label", [
    ("policy_loss_mode = 'sapo'\n", "[training] policy_loss_mode"),
    ("policy_loss_mode = 'kl_cov'\n", "[training] policy_loss_mode"),
    ("importance_sampling_level = 'sequence'\nclip_eps = 0.2\n", "[training] importance_sampling_level"),
])
def test_tinker_refuses_what_its_losses_do_not_compute_by_name(tmp_path: Path, text: str, label: str) -> None:
    errs = errors_of(tmp_path, TINKER + text)
    assert len(errs) == 1 and label in errs[0] and "not built yet for backend 'tinker'" in errs[0], errs
    assert "\n" not in errs[0]


def test_tinker_runs_cispo_with_its_own_loss(tmp_path: Path) -> None:
    c = load(tmp_path, TINKER + "policy_loss_mode = 'cispo'\nclip_eps = 0.2\nclip_eps_high = 0.28\n").config
    assert c.training.policy_loss_mode == "cispo"
    errs = errors_of(tmp_path, TINKER + "[inference]\nimportance_sampling_correction = true\n")
    assert any("[inference] importance_sampling_correction" in e for e in errs), errs


READERS = {
    "[inference] importance_sampling_correction": "[inference]\nimportance_sampling_correction = true\n",
    "[training] clip_eps": "[training]\nclip_eps = 0.2\n",
    "[training] policy_loss_mode": "[training]\npolicy_loss_mode = 'sapo'\n",
    "[training] clip_ratio_c": "[training]\nclip_ratio_c = 3.0\n",
}
CUTS = {"top_k": "[training]\ntop_p = 1.0\ntop_k = 20\n", "min_p": "[training]\ntop_p = 1.0\nmin_p = 0.05\n",
        "top_p": "[training]\ntop_p = 0.9\n"}
SERVER = "[inference]\nengine = 'vllm'\nurl = 'http://127.0.0.1:8000/v1'\n"


def _merge(*parts: str) -> str:
    """TOML fragments with their [training] tables joined (a table may appear once)."""
    sections: dict[str, list[str]] = {}
    for part in parts:
        head = ""
        for line in part.splitlines():
            if line.startswith("["):
                head = line
                sections.setdefault(head, [])
            elif line:
                sections[head].append(line)
    return "".join(f"{h}\n" + "".join(f"{x}\n" for x in body) for h, body in sections.items())


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_truncating_server_with_a_ratio_reader_is_refused_naming_both(tmp_path: Path, reader: str,
                                                                         cut: str) -> None:
    errs = errors_of(tmp_path, _merge(READERS[reader], CUTS[cut], SERVER))
    assert len(errs) == 1, errs
    assert f"[training] {cut} = " in errs[0] and reader in errs[0] and NOT_BUILT_TEXT in errs[0], errs
    assert "engine = 'vllm'" in errs[0] and "\n" not in errs[0] and "c.toml:" in errs[0], errs


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_the_in_process_engine_trains_every_ratio_reader_truncated(tmp_path: Path, reader: str, cut: str) -> None:
    load(tmp_path, _merge(READERS[reader], CUTS[cut]))


def test_ratio_readers_load_with_the_default_top_p(tmp_path: Path) -> None:
    for text in ("[training]\npolicy_loss_mode = 'cispo'\nclip_eps_high = 4.0\n", "[training]\npolicy_loss_mode = 'sapo'\n",
                 "[training]\nimportance_sampling_level = 'sequence'\nclip_eps = 0.2\n"):
        c = load(tmp_path, text).config
        assert c.training.top_p == 0.95


def test_a_remote_service_is_refused_too(tmp_path: Path) -> None:
    (err,) = errors_of(tmp_path, "[backend]\nbackend = 'tinker'\n[training]\nclip_eps = 0.2\n")
    assert "backend = 'tinker'" in err and "top_p = 0.95 (the default)" in err


def test_the_default_top_p_is_named_as_the_default(tmp_path: Path) -> None:
    (err,) = errors_of(tmp_path, SERVER + "[training]\nclip_eps = 0.2\n")
    assert "top_p = 0.95 (the default)" in err and err.startswith(f"{tmp_path / 'c.toml'}:5: [training] clip_eps:")
    assert "hint: top_p = 1.0, or clip_eps = 0.0; or engine = \"pytorch\"" in err


def test_what_does_not_read_the_ratio_samples_as_it_likes(tmp_path: Path) -> None:
    """Plain policy gradient (standard, no clip) at either level, a KL penalty, and supervised
    runs keep top_p/top_k/min_p; an untruncated sampler runs every objective."""
    for text in ("[training]\ntop_k = 20\nimportance_sampling_level = 'sequence'\nkl_coef = 0.1\n",
                 "[training]\ntrainer = 'sft'\nsft_data_path = 'd.jsonl'\nclip_eps = 0.2\n",
                 "[training]\ntop_p = 1.0\npolicy_loss_mode = 'cispo'\nclip_eps_high = 4.0\n"
                 "[inference]\nimportance_sampling_correction = true\n"):
        load(tmp_path, text)


@pytest.mark.parametrize("text,label,switch", [
    ("sapo_temperature_pos = 2.0\n", "[training] sapo_temperature_pos", 'policy_loss_mode = "sapo"'),
    ("policy_loss_mode = 'sapo'\nclip_eps = 0.2\n", "[training] clip_eps", '"cispo"'),
    ("policy_loss_mode = 'cispo'\nclip_eps_high = 1.0\nclip_ratio_c = 3.0\n", "[training] clip_ratio_c",
     '"standard", "kl_cov" or "clip_cov"'),
])
def test_keys_the_chosen_loss_does_not_read_warn(tmp_path: Path, text: str, label: str, switch: str) -> None:
    named = [w for w in warnings_of(tmp_path, UNTRUNCATED + text) if f"{label}:" in w]
    assert len(named) == 1 and "not read" in named[0] and switch in named[0], named


def test_the_correction_mode_without_the_correction_warns(tmp_path: Path) -> None:
    named = [w for w in warnings_of(tmp_path, "[inference]\nimportance_sampling_mode = 'token_mask'\n")
             if "[inference] importance_sampling_mode:" in w]
    assert len(named) == 1 and "importance_sampling_correction = true" in named[0]


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_sum", "constant"])
def test_gspo_under_an_aggregation_that_sums_a_completions_tokens_warns(tmp_path: Path, aggregation: str) -> None:
    """One sequence ratio per completion, summed over its tokens, weights a completion by its
    length (TRL warns alike); a mean per completion is GSPO's objective and does not warn."""
    text = UNTRUNCATED + f"importance_sampling_level = 'sequence'\nloss_aggregation = '{aggregation}'\n"
    (warning,) = [w for w in warnings_of(tmp_path, text) if "[training] importance_sampling_level:" in w]
    assert "weight each completion by its length" in warning and 'loss_aggregation = "seq_mean_token_mean"' in warning
    mean = UNTRUNCATED + "importance_sampling_level = 'sequence'\nloss_aggregation = 'seq_mean_token_mean'\n"
    assert not [w for w in warnings_of(tmp_path, mean) if "importance_sampling_level" in w]
    assert not [w for w in warnings_of(tmp_path, UNTRUNCATED) if "importance_sampling_level" in w]
