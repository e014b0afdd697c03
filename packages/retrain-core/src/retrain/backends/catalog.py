"""What each backend can do, where it comes from, and whether it is installed.

A distribution makes a backend known by registering a `BackendDefinition` in the
`retrain.backends` entry-point group: its capabilities, its option schema, the options it
refuses as not built yet; the built-in distributions do exactly what a third party does.
Core holds no backend's facts, only `DISTRIBUTION_HINTS`: which distribution ships each
built-in name, so a config naming one whose distribution is missing is told what to install.
Loading an entry point imports only the small definition module, never torch, and checks the
backend contract the definition declares against `BACKEND_CONTRACT`: a mismatch makes the
backend unavailable with one line naming the distribution and both contracts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from typing import Any, Literal

from retrain.backends.options import OptionSchema, OptionSpec
from retrain.backends.protocol import BACKEND_CONTRACT
from retrain.registry import contract
from retrain.registry.contract import Contract
from retrain.registry.health import install_hint

ResumeMode = Literal["unsupported", "adapter_only", "exact"]
ENTRY_POINT_GROUP = "retrain.backends"
#: The capabilities that each answer one rule of config validation (retrain.validation)
VALIDATION_FLAGS = ("multi_device", "service_settings", "samples_apart_from_training", "full_token_distributions", "inference_servers",
                    "sampler_correction", "ppo_clipping", "optimizer_batch", "exclusive_precisions",
                    "seeded_options", "strict_advantages", "local_devices", "sampler_truncation",
                    "max_async_level", "in_process_async", "tensor_objectives", "routing_replay_engines",
                    "teacher_models")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class RefusedSetting:
    """A setting a backend cannot honour: any value but the default is refused, with the line
    `cannot be set with backend = "<name>": <why>` and `hint`. `key` is dotted ("training.min_p")."""

    key: str
    why: str
    hint: str = "remove it"


@dataclass(frozen=True, kw_only=True)
class BackendCapabilities:
    reports_sync_loss: bool = True
    preserves_token_advantages: bool = False
    supports_checkpoint_resume: bool = True
    resume_runtime_dependent: bool = False
    checkpoint_resume_mode: ResumeMode = "adapter_only"
    supports_echo_shared_forward: bool = False
    # [training] loss_aggregation values the backend computes; others are refused at load
    loss_aggregations: tuple[str, ...] = ("token_mean",)
    # computes [training] kl_coef's penalty to the reference policy; refused at load otherwise
    reference_kl: bool = False
    # [training] policy_loss_mode and importance_sampling_level values it computes; others are
    # refused at load
    policy_losses: tuple[str, ...] = ("standard",)
    ratio_levels: tuple[str, ...] = ("token",)
    # Each flag below answers one validation rule; the defaults are what a plugin backend gets.
    # trains one policy on several [backend] devices (torchrun, FSDP2)
    multi_device: bool = False
    # reads [model] base_url and [backend] throttle_dir and max_concurrent (a service's address
    # and its rate limits); any other backend refuses them
    service_settings: bool = False
    # samples from saved weights apart from those that train, so max_async_level needs no
    # inference server
    samples_apart_from_training: bool = False
    # settings it cannot honour, refused at load with its own reason
    refused_settings: tuple[RefusedSetting, ...] = ()
    # the trainer sees each token's full distribution (uncertainty_kind = "shannon_entropy")
    full_token_distributions: bool = True
    # an [inference] engine server (vllm, sglang, openai) samples for it
    inference_servers: bool = False
    # applies [inference] importance_sampling_correction in its policy loss
    sampler_correction: bool = False
    # honours [training] clip_eps; a backend that may not is warned about
    ppo_clipping: bool = False
    # captures and replays optimizer batches ([optimizer_batch], trainer = "optimizer_replay")
    optimizer_batch: bool = False
    # [backend.options] loading precisions, at most one on; the first is on by default, and
    # choosing another turns it off unless it is set
    exclusive_precisions: tuple[str, ...] = ()
    # [backend.options] switches that need a [training] seed
    seeded_options: tuple[str, ...] = ()
    # refuses [backend.options] strict_advantages = false (trains on one advantage per completion)
    strict_advantages: bool = False
    # trains on this machine's [backend] devices: a config naming a GPU this machine does not
    # show is warned about before the run starts (retrain.commands.machine)
    local_devices: bool = False
    # scores each sampled token under the truncation (top_p, top_k, min_p) its in-process
    # engine ([inference] engine = "pytorch") drew it with, so losses that read the policy
    # ratio may run with a truncating sampler there (retrain.validation.ratio)
    sampler_truncation: bool = False
    # the largest [training] max_async_level it honours; above 1 it samples from published
    # versions of its weights (retrain.backends.protocol.VersionedSampler)
    max_async_level: int = 1
    # samples ahead with its in-process engine (engine = "pytorch"), from a copy of the
    # published versions, while the trained weights change
    in_process_async: bool = False
    # computes any objective's loss on its own tensors (retrain.backends.objective), a plugin
    # objective included; otherwise only the policy_losses it lists
    tensor_objectives: bool = False
    # the [inference] engines whose expert choices it records while sampling a mixture-of-experts
    # model and replays in its training forward ([inference] routing_replay); () refuses it
    routing_replay_engines: tuple[str, ...] = ()
    # loads a [teacher] model beside the student (retrain.backends.protocol.TeacherHost); a
    # [teacher] url works with every backend
    teacher_models: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "reports_sync_loss": self.reports_sync_loss,
            "preserves_token_advantages": self.preserves_token_advantages,
            "supports_checkpoint_resume": self.supports_checkpoint_resume,
            "resume_runtime_dependent": self.resume_runtime_dependent,
            "checkpoint_resume_mode": self.checkpoint_resume_mode,
            "supports_echo_shared_forward": self.supports_echo_shared_forward,
            "loss_aggregations": list(self.loss_aggregations),
            "reference_kl": self.reference_kl,
            "policy_losses": list(self.policy_losses),
            "ratio_levels": list(self.ratio_levels),
            **{name: _plain(getattr(self, name)) for name in VALIDATION_FLAGS},
            "refused_settings": [{"key": r.key, "why": r.why, "hint": r.hint} for r in self.refused_settings],
        }

    def summary(self) -> str:
        """One line for `retrain backends` and `retrain trace`."""
        def flag(value: bool) -> str:
            return "yes" if value else "no"

        return (f"sync loss {flag(self.reports_sync_loss)}, token advantages {flag(self.preserves_token_advantages)}, "
                f"resume {self.checkpoint_resume_mode}{' (runtime-dependent)' if self.resume_runtime_dependent else ''}, "
                f"ECHO shared forward {flag(self.supports_echo_shared_forward)}, "
                f"loss aggregations {', '.join(self.loss_aggregations)}; "
                f"policy losses {', '.join(self.policy_losses)} ({', '.join(self.ratio_levels)} ratios)")


PLUGIN_DEFAULT_CAPABILITIES = BackendCapabilities()


@dataclass(frozen=True)
class BackendDefinition:
    """A backend as registered in the `retrain.backends` entry-point group.

    `factory` is a `module:attr` path to a callable `(TrainConfig) -> TrainHelper`, imported
    only when a run starts. `contract` is the backend contract the distribution was built
    against, written as a literal in its definition module (importing `BACKEND_CONTRACT` there
    would always match). `available=False` marks a backend that is not built yet (its
    distribution may ship the metadata only) or one whose contract this core does not
    support; `note` then says which and what to use instead.
    """

    name: str
    factory: str
    distribution: str
    capabilities: BackendCapabilities = PLUGIN_DEFAULT_CAPABILITIES
    option_schema: OptionSchema | None = None
    #: options of `option_schema` that nothing reads yet: option -> (what, instead); a value
    #: that asks for the feature is refused as not built yet (retrain.validation.built)
    not_built_options: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    dependency: str = ""
    hint: str = ""
    available: bool = True
    note: str = ""
    contract: Contract | None = None
    #: `module:attr` of a factory `(TrainConfig) -> serving engine` for `retrain serve`
    #: (retrain.backends.serving); "" when the backend offers none
    serving: str = ""
    #: `module:attr` of `(TrainConfig) -> dict` for `retrain doctor CONFIG`: whether the
    #: backend's remote service answers and what it serves ({answers, error | models, ...});
    #: "" when there is nothing remote to probe
    probe: str = ""
    #: the file a checkpoint folder of this backend holds in place of weights (a record of
    #: where a remote service keeps them); "" when its checkpoints hold the weights
    checkpoint_record: str = ""
    #: `module:attr` of a torch-free `(folder) -> RecordCheck` that `retrain resume-check`
    #: calls on a folder holding `checkpoint_record`
    check_record: str = ""
    #: `module:attr` of `(TrainConfig) -> Tokenizer`: the tokenizer a run reads its prompts
    #: with, loaded without the model (`retrain data` shows prompts through it); "" when the
    #: backend offers none
    tokenizer: str = ""
    #: `module:attr` of `(retrain.backends.export.ExportRequest) -> ExportResult` for
    #: `retrain export`: the run's trained weights as a transformers folder, an adapter or a
    #: GGUF; "" when the backend's weights cannot leave it that way
    export: str = ""


@dataclass(frozen=True)
class RecordCheck:
    """What a backend's `check_record` found in a checkpoint folder: facts for the report and
    findings as (level, code, message), level one of error / warning / info."""

    facts: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class DistributionHint:
    """Where a built-in backend name comes from, for a machine that lacks its distribution."""

    distribution: str
    hint: str
    #: "" when the distribution ships it; otherwise why it is not built yet and what to use
    not_built: str = ""


#: The built-in names and the distribution that ships each: the only backend facts core holds.
DISTRIBUTION_HINTS: dict[str, DistributionHint] = {
    "local": DistributionHint("retrain-backends-local", install_hint("retrain-backends-local")),
    "unsloth": DistributionHint("retrain-backends-unsloth",
                                install_hint("retrain-backends-unsloth", "CUDA GPU required at run time")),
    "tinker": DistributionHint("retrain-backends-tinker", install_hint("retrain-backends-tinker")),
    "prime_rl": DistributionHint("retrain-backends-prime", "no retrain distribution ships the PRIME-RL bridge yet",
                                 not_built="the PRIME-RL bridge is not built yet in this version; "
                                           "use backend = \"local\""),
}
BUILTIN_BACKENDS: tuple[str, ...] = tuple(DISTRIBUTION_HINTS)


def missing_definition(name: str) -> BackendDefinition:
    """What core knows of a built-in name whose distribution is not installed: where to get it."""
    hint = DISTRIBUTION_HINTS[name]
    return BackendDefinition(name=name, factory="", distribution=hint.distribution, hint=hint.hint,
                             available=not hint.not_built, note=hint.not_built)


@dataclass(frozen=True)
class BackendEntry:
    """A backend name as the catalog sees it on this machine."""

    name: str
    definition: BackendDefinition
    source: str  # builtin | entry_point | plugin/hook | plugin/default
    installed: bool  # its distribution registered an entry point here
    problems: list[str] = field(default_factory=list)

    @property
    def runnable(self) -> bool:
        return self.installed and self.definition.available and not self.problems

    @property
    def status(self) -> str:
        if self.problems:
            return "unusable (see problem)"
        if not self.definition.available:
            return "not built yet in this version"
        if not self.installed:
            return "not installed"
        return "available"


@cache
def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def entry_point_names() -> list[str]:
    return sorted(_entry_points())


def _load_entry(name: str) -> tuple[BackendDefinition | None, list[str]]:
    ep = _entry_points().get(name)
    if ep is None:
        return None, []
    return contract.load_definition(ep, BackendDefinition, "backend", BACKEND_CONTRACT)


def lookup(name: str) -> BackendEntry | None:
    """Catalog entry of a built-in or entry-point backend name; None when unknown."""
    loaded, problems = _load_entry(name)
    if name in DISTRIBUTION_HINTS:
        definition = loaded if loaded is not None else missing_definition(name)
        return BackendEntry(name, definition, "builtin", installed=loaded is not None, problems=problems)
    if loaded is not None:
        return BackendEntry(name, loaded, "entry_point", installed=True, problems=problems)
    if problems:
        stub = BackendDefinition(name=name, factory="", distribution="?", available=False)
        return BackendEntry(name, stub, "entry_point", installed=True, problems=problems)
    return None


def definition_of(name: str) -> BackendDefinition:
    """The definition of a built-in or registered backend name (KeyError when unknown): its
    distribution's when installed, else what `DISTRIBUTION_HINTS` says of it."""
    entry = lookup(name)
    if entry is None:
        raise KeyError(name)
    return entry.definition


def entry_for(name: str, options: Mapping[str, Any]) -> BackendEntry | None:
    """Catalog entry of any configured backend: a dotted plugin path or a registered name."""
    if "." in name or ":" in name:
        return dotted_plugin_entry(name, options)
    return lookup(name)


def all_entries() -> list[BackendEntry]:
    names = list(BUILTIN_BACKENDS) + [n for n in entry_point_names() if n not in DISTRIBUTION_HINTS]
    return [e for n in names if (e := lookup(n)) is not None]


_CAPABILITY_HOOKS = ("retrain_backend_capabilities", "RETRAIN_BACKEND_CAPABILITIES")
_SCHEMA_HOOKS = ("retrain_backend_option_schema", "RETRAIN_BACKEND_OPTION_SCHEMA")


def dotted_plugin_entry(target: str, options: Mapping[str, Any]) -> BackendEntry:
    """Catalog entry of a dotted-path backend plugin, reading its optional metadata hooks.

    Hooks are looked up on the target object, then on its module; a callable hook is called
    with a copy of the options (or with no arguments if it takes none).
    """
    module_name, _, attr = target.replace(":", ".").rpartition(".")
    caps = PLUGIN_DEFAULT_CAPABILITIES
    schema: OptionSchema | None = None
    source = "plugin/default"
    try:
        module = importlib.import_module(module_name)
    except Exception:
        module = None
    if module is not None:
        holders = [getattr(module, attr, None), module]
        raw_caps = _hook(holders, _CAPABILITY_HOOKS, options)
        parsed = _parse_capabilities(raw_caps)
        if parsed is not None:
            caps, source = parsed, "plugin/hook"
        raw_schema = _hook(holders, _SCHEMA_HOOKS, options)
        if isinstance(raw_schema, Mapping):
            schema = {k: _parse_option_spec(v) for k, v in raw_schema.items()}
    definition = BackendDefinition(name=target, factory=target, distribution="(plugin)",
                                   capabilities=caps, option_schema=schema)
    return BackendEntry(target, definition, source, installed=module is not None)


def _hook(holders: list[Any], names: tuple[str, ...], options: Mapping[str, Any]) -> Any:
    for holder in holders:
        if holder is None:
            continue
        for name in names:
            value = getattr(holder, name, None)
            if value is None:
                continue
            if callable(value) and not isinstance(value, type):
                try:
                    return value(dict(options))
                except TypeError:
                    return value()
            return value
    return None


def _parse_capabilities(raw: Any) -> BackendCapabilities | None:
    if isinstance(raw, BackendCapabilities):
        return raw
    if not isinstance(raw, Mapping):
        return None
    required = ("reports_sync_loss", "preserves_token_advantages", "supports_checkpoint_resume",
                "resume_runtime_dependent")
    if any(k not in raw for k in required):
        return None
    mode = raw.get("checkpoint_resume_mode", raw.get("resume_mode", "adapter_only"))
    if mode not in ("unsupported", "adapter_only", "exact"):
        mode = "adapter_only"
    return BackendCapabilities(
        reports_sync_loss=bool(raw["reports_sync_loss"]),
        preserves_token_advantages=bool(raw["preserves_token_advantages"]),
        supports_checkpoint_resume=bool(raw["supports_checkpoint_resume"]),
        resume_runtime_dependent=bool(raw["resume_runtime_dependent"]),
        checkpoint_resume_mode=mode,
        supports_echo_shared_forward=bool(raw.get("supports_echo_shared_forward", False)),
        loss_aggregations=tuple(str(a) for a in raw.get("loss_aggregations", ("token_mean",))),
        reference_kl=bool(raw.get("reference_kl", False)),
        policy_losses=tuple(str(m) for m in raw.get("policy_losses", ("standard",))),
        ratio_levels=tuple(str(v) for v in raw.get("ratio_levels", ("token",))),
        refused_settings=tuple(RefusedSetting(str(r["key"]), str(r["why"]), str(r.get("hint", "remove it")))
                               for r in raw.get("refused_settings", ()) if isinstance(r, Mapping)),
        **_declared_flags(raw),
    )


def _declared_flags(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The validation flags a plugin's mapping declares; those it leaves out keep their default."""
    out: dict[str, Any] = {}
    for name in VALIDATION_FLAGS:
        if name in raw:
            default = getattr(PLUGIN_DEFAULT_CAPABILITIES, name)
            out[name] = tuple(str(v) for v in raw[name]) if isinstance(default, tuple) else bool(raw[name])
    return out


_TYPE_NAMES: dict[str, type] = {"bool": bool, "boolean": bool, "int": int, "integer": int,
                                "float": float, "str": str, "string": str}


def _parse_option_spec(raw: Any) -> OptionSpec:
    if isinstance(raw, OptionSpec):
        return raw
    tp = raw.get("type", raw.get("value_type", str)) if isinstance(raw, Mapping) else str
    if isinstance(tp, str):
        tp = _TYPE_NAMES.get(tp.lower(), str)
    fields = raw if isinstance(raw, Mapping) else {}
    choices = fields.get("choices")
    return OptionSpec(tp, fields.get("default"), choices=tuple(choices) if choices else None,
                      validator=fields.get("validator"), cuda_only=str(fields.get("cuda_only", "")))


def describe_catalog() -> dict[str, Any]:
    """The machine-readable catalog behind `retrain backends --json`; the options a definition
    lists as not built are described with `built` false."""
    from retrain.backends.options import describe_schema

    def options(entry: BackendEntry) -> dict[str, dict[str, Any]]:
        return describe_schema(entry.definition.option_schema or {}, entry.definition.not_built_options)

    return {
        "contracts": {"backend": contract.text(BACKEND_CONTRACT)},
        "builtins": [_describe(e, options) for e in all_entries() if e.source == "builtin"],
        "entry_points": [_describe(e, options) for e in all_entries() if e.source != "builtin"],
        "plugin": {
            "dotted_path_supported": True,
            "entry_point_group": ENTRY_POINT_GROUP,
            "default_capabilities": PLUGIN_DEFAULT_CAPABILITIES.as_dict(),
            "capability_hooks": list(_CAPABILITY_HOOKS),
            "option_schema_hooks": list(_SCHEMA_HOOKS),
            "option_schema_format": "{key: {type|value_type, default, choices?, validator?, cuda_only?}}",
            "refused_settings_format": "[{key: section.key, why, hint?}]",
        },
    }


def _describe(entry: BackendEntry, options: Callable[[BackendEntry], dict[str, dict[str, Any]]]) -> dict[str, Any]:
    d = entry.definition
    return {
        "name": entry.name,
        "source": entry.source,
        "distribution": d.distribution,
        "contract": contract.text(d.contract) if d.contract is not None else None,
        "installed": entry.installed,
        "status": entry.status,
        "note": d.note,
        "dependency": {"import": d.dependency, "hint": d.hint},
        "capabilities": d.capabilities.as_dict(),
        "option_schema": options(entry),
        "problems": entry.problems,
    }
