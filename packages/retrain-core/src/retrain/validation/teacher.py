"""The scorers beside the reward: `[teacher]` (on-policy distillation) and `[reward] type =
"model"` (a reward model). What each needs of the rest of the config; a backend is judged by
its declared capabilities (`teacher_models`, `preserves_token_advantages`), never its name.
Their URLs are checked with every other URL (`urls.py`)."""

from __future__ import annotations

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.validation.backend import backend_capabilities, or_backend
from retrain.validation.built import NOT_BUILT_TEXT


def check_teacher(c: TrainConfig) -> list[ConfigIssue]:
    t = c.teacher
    if not t.enabled:
        return []
    key = "[teacher] url" if t.url else "[teacher] model"
    issues: list[ConfigIssue] = []
    if not c.is_rl:
        issues.append(ConfigIssue(f"distillation trains in the RL trainer, not trainer = {c.training.trainer!r}",
                                  key=key, hint='trainer = "retrain", or remove [teacher]'))
    if t.url:
        if not t.model:
            issues.append(ConfigIssue("must name the model the server serves", key="[teacher] model",
                                      hint='model = "<the served model name>"'))
        if t.adapter:
            issues.append(ConfigIssue("a server teacher's adapter is the server's to load", key="[teacher] adapter",
                                      hint="serve the adapter (vLLM --lora-modules) and name it in [teacher] model"))
    caps = backend_capabilities(c)
    if not t.url and not caps.teacher_models:
        issues.append(ConfigIssue(f"a teacher loaded beside the student on backend {c.backend.backend!r} is "
                                  f"{NOT_BUILT_TEXT}", key="[teacher] model",
                                  hint="serve the teacher (vLLM, retrain serve) and set [teacher] url"
                                       + or_backend("teacher_models")))
    if not caps.preserves_token_advantages:
        issues.append(ConfigIssue(f"the teacher's term differs token by token, and backend {c.backend.backend!r} "
                                  "keeps one advantage per completion", key=key,
                                  hint="remove [teacher]" + or_backend("preserves_token_advantages")))
    if c.training.tl_grpo:
        issues.append(ConfigIssue(f"distillation with TL-GRPO (whose turn advantages replace token advantages) is "
                                  f"{NOT_BUILT_TEXT}", key="[training] tl_grpo", hint="tl_grpo = false"))
    return issues


def check_reward_model(c: TrainConfig) -> list[ConfigIssue]:
    r = c.reward
    if r.type != "model":
        return []
    issues: list[ConfigIssue] = []
    if not r.model:
        issues.append(ConfigIssue("type = model needs the reward model", key="[reward] model",
                                  hint='model = "path/to/a/sequence-classification/checkpoint"'))
    if "{response}" not in r.model_template:
        issues.append(ConfigIssue("must hold {response}, where the completion goes", key="[reward] model_template",
                                  hint='model_template = "{prompt}\\n{response}"'))
    return issues
