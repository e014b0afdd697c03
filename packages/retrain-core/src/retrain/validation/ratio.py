"""The policy ratio's two logprobs must be over the same distribution.

A sampler that truncates (`top_p < 1`, `top_k > 0`, `min_p > 0`) returns each token's logprob
under the kept tokens, renormalised (retrain's engines; vLLM with processed logprobs; SGLang).
A backend that declares `sampler_truncation` scores each sampled token the same way when its
in-process engine sampled it (`[inference] engine = "pytorch"`): it rebuilds the engine's kept
set from its own logits with the engine's rule, so the on-policy ratio is 1 and every loss
that reads the ratio runs. Elsewhere the trainer's logprob is over the whole vocabulary and
the ratio of the two is the kept mass Z <= 1: plain policy gradient (`standard` without a
clip) only scales each token's step by it, but a loss that clips, gates, penalises or caps the
ratio, and the sampler-mismatch correction, would act on the truncation instead of on the
policy's change. An inference server's kept set cannot be rebuilt (its rule, its order of
filters and whether its logprobs are truncated at all are its own), nor can a remote service's,
so those combinations are refused by name.
"""

from __future__ import annotations

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.validation.built import NOT_BUILT_TEXT

_DEFAULTS = TrainConfig()


def truncations(c: TrainConfig) -> list[tuple[str, object, str]]:
    """(key, value, the setting that keeps every token) of each sampler setting that drops
    tokens, those the config sets first."""
    t = c.training
    cuts: list[tuple[str, object, str]] = [(key, value, f"{key} = {keep}") for key, value, keep in
            (("top_p", t.top_p, 1.0), ("top_k", t.top_k, 0), ("min_p", t.min_p, 0.0)) if value != keep]
    # one the config sets first: the default top_p = 0.95 only when nothing else truncates
    cuts.sort(key=lambda cut: getattr(_DEFAULTS.training, cut[0]) == cut[1])
    return cuts


def ratio_reader(c: TrainConfig) -> tuple[str, object, str] | None:
    """(label, value, the setting that stops it) of the first setting whose update reads the
    ratio's value beyond a per-token scale, or None."""
    t, inf = c.training, c.inference
    if inf.importance_sampling_correction:
        return "[inference] importance_sampling_correction", True, "importance_sampling_correction = false"
    if t.policy_loss_mode != "standard":
        return "[training] policy_loss_mode", t.policy_loss_mode, 'policy_loss_mode = "standard"'
    if t.clip_eps > 0:
        return "[training] clip_eps", t.clip_eps, "clip_eps = 0.0"
    if t.clip_ratio_c > 0:
        return "[training] clip_ratio_c", t.clip_ratio_c, "clip_ratio_c = 0.0"
    return None


def scores_truncated(c: TrainConfig) -> bool:
    """The trainer scores sampled tokens under the sampler's own truncation."""
    from retrain.validation.backend import backend_capabilities

    return c.inference.engine == "pytorch" and backend_capabilities(c).sampler_truncation


def check_ratio(c: TrainConfig) -> list[ConfigIssue]:
    if c.training.trainer == "sft":
        return []
    cuts, reader = truncations(c), ratio_reader(c)
    if not cuts or reader is None or scores_truncated(c):
        return []
    key, value, _ = cuts[0]
    keep = " and ".join(k for _, _, k in cuts)
    label, read, stop = reader
    default = getattr(_DEFAULTS.training, key) == value
    where = f"[inference] engine = {c.inference.engine!r}" if c.inference.engine != "pytorch" else \
        f"backend = {c.backend.backend!r}"
    # named by the setting the file most likely holds, so the error carries its line
    return [ConfigIssue(
        f"[training] {key} = {_toml(value)}{' (the default)' if default else ''} truncates the sampler, whose "
        f"logprobs are then over the kept tokens while the trainer's are over the whole vocabulary, and {label} = "
        f"{_toml(read)} reads their ratio; computing the trainer's over the kept tokens with {where} is "
        f"{NOT_BUILT_TEXT}",
        key=label if default else f"[training] {key}",
        hint=f"{keep}, or {stop}" + ('; or engine = "pytorch"' if c.inference.engine != "pytorch" else ""))]


def _toml(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)
