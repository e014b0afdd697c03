"""Warnings: legal settings that are probably not what the user meant (keys of a feature the
config leaves off are `validate.inert`'s)."""

from __future__ import annotations

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.validation.backend import backend_capabilities


def collect_warnings(c: TrainConfig) -> list[ConfigIssue]:
    out: list[ConfigIssue] = []
    b, t = c.backend, c.training
    if b.adapter_path.startswith("/tmp"):
        out.append(ConfigIssue("adapters under /tmp may be lost on reboot", key="[backend] adapter_path"))
    if t.temperature > 2.0:
        out.append(ConfigIssue(f"{t.temperature} is unusually high for sampling", key="[training] temperature"))
    # capture and replay require save_every = 0: no warning for what they impose
    if t.save_every == 0 and not (c.optimizer_batch.capture or t.trainer == "optimizer_replay"):
        msg = "0 disables periodic checkpoints; only the final adapter is saved"
        if "wandb" in c.logging.tracker_names() and c.logging.checkpoint_artifacts != "off":
            msg += " (and no checkpoint is uploaded to W&B)"
        out.append(ConfigIssue(msg, key="[training] save_every"))
    if t.weight_decay < 0:
        out.append(ConfigIssue(f"{t.weight_decay} is negative", key="[training] weight_decay"))
    if (samples := c.eval.n or c.eval.k) > 1 and c.eval.temperature == 0:
        out.append(ConfigIssue(f"{samples} samples per problem at temperature 0 are identical (greedy)",
                               key="[eval] temperature"))
    if t.clip_eps > 0 and not backend_capabilities(c).ppo_clipping:
        out.append(ConfigIssue(f"backend {b.backend!r} may ignore PPO clipping", key="[training] clip_eps"))
    # TRL warns alike: every aggregation but a mean per completion sums a completion's tokens
    if t.importance_sampling_level == "sequence" and t.loss_aggregation != "seq_mean_token_mean":
        out.append(ConfigIssue(
            f"'sequence' ratios under loss_aggregation = {t.loss_aggregation!r} weight each completion by its "
            "length (its one ratio's loss is summed over its tokens), not GSPO's mean per completion",
            key="[training] importance_sampling_level", hint='loss_aggregation = "seq_mean_token_mean"'))
    if c.teacher.enabled and (t.temperature != 1.0 or t.top_p < 1.0 or t.top_k > 0 or t.min_p > 0):
        out.append(ConfigIssue(
            f"the teacher's term compares the sampler's logprobs (temperature {t.temperature:g}, top_p {t.top_p:g}"
            f"{f', top_k {t.top_k}' if t.top_k else ''}{f', min_p {t.min_p:g}' if t.min_p else ''}) with the "
            "teacher's at temperature 1 over the whole vocabulary, so the KL it lowers is the tempered, truncated "
            "sampler's, not the policy's", key="[training] temperature",
            hint="distil with temperature = 1.0, top_p = 1.0 (as on-policy distillation recipes do)"))
    return out
