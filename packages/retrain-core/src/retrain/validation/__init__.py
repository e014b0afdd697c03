"""From a config's tables to a config a run may start with: loading (`load.load_config`: TOML,
defaults, overrides, environment fallbacks, then `validate`), the validation passes, the
preflight trace, and the configuration page rendered from the same rules (`page`). It stands
one floor above retrain.config (what a config is) and the packages whose rules it asks
(backends' capabilities and options, the registry, advantages, rewards, planning, evaluation),
so none of them imports it; training and the CLI do.

Validation passes over a fully layered config. Every pass reports all it finds.

`validate(config)` returns the normalised config (canonical uncertainty kind, backend options
filled with defaults), the errors and the warnings. Passes: built (keys, values and options
that nothing reads yet are refused), bounds (single fields and cross-field rules), data (`[data]`'s keys), ratio (a
truncating sampler with a loss that reads the policy ratio), evaluation (`[eval]`), discover
(`trainer = "ttt_discover"`), trackers (`[logging] trackers`), teacher (`[teacher]`, and
`[reward] type = "model"`), modes (algorithm selectors), runtime (model, devices, backend,
environment, selectors, URLs), plugins (dotted paths import), params (the keys of `[algorithm]`'s
free-form tables against what the algorithm reads); then the warnings: keys of a feature the
config leaves off (inert), keys of those tables another algorithm reads (params) and settings
that are legal but probably unmeant (warn). A rule that
depends on the backend asks its declared capabilities (backend), never its name.

The preflight of a loaded config's flow is `trace.trace(config)` (`retrain trace`, and the RL
trainer at start): it builds what the run would use (preflight), checks the dependencies, the
algorithm against the backend (compat) and runs the pipeline on synthetic groups (probe). It
is kept out of `validate`, which loading runs: it builds the reward and the advantage pipeline.
"""

from __future__ import annotations

from retrain.config.errors import ConfigIssue
from retrain.config.schema import TrainConfig
from retrain.validation.bounds import check_bounds
from retrain.validation.built import check_built, drop_superseded
from retrain.validation.data import check_data
from retrain.validation.discover import check_discover
from retrain.validation.evaluation import check_eval
from retrain.validation.inert import inert_warnings
from retrain.validation.mode import check_modes
from retrain.validation.params import check_param_tables
from retrain.validation.plugins import check_plugins
from retrain.validation.ratio import check_ratio
from retrain.validation.runtime import check_runtime
from retrain.validation.teacher import check_reward_model, check_teacher
from retrain.validation.trackers import check_trackers
from retrain.validation.warn import collect_warnings


def validate(
    config: TrainConfig, *, import_plugins: bool = True
) -> tuple[TrainConfig, list[ConfigIssue], list[ConfigIssue]]:
    refusals = check_built(config)
    errors: list[ConfigIssue] = []
    errors += check_bounds(config)
    errors += check_ratio(config)
    errors += check_eval(config)
    errors += check_data(config)
    errors += check_discover(config)
    errors += check_trackers(config)
    errors += check_teacher(config)
    errors += check_reward_model(config)
    config, mode_issues = check_modes(config)
    errors += mode_issues
    config, runtime_issues = check_runtime(config)
    errors += runtime_issues
    errors = refusals + drop_superseded(errors, refusals)
    if import_plugins and not errors:
        errors += check_plugins(config)
    unread, unread_here = check_param_tables(config, import_plugins=import_plugins and not errors)
    errors += unread
    warnings = [*inert_warnings(config), *unread_here, *collect_warnings(config)] if not errors else []
    return config, errors, warnings
