"""What this version builds: the keys, values and backend options that no runtime code reads yet.

A config that sets one of them to anything but a live value is refused at load (so `explain`,
`trace` and a run refuse it alike) with one line naming the key, "not built yet in this
version" and what to use instead. A backend option is refused only for a value that asks for
its feature (`_asks_for`): its default is accepted (a normalised option table, such as a
campaign validates each condition with, spells every default out), and so is false for a
switch, which states what this version does. Nothing is accepted and then ignored: a test walks every
schema field and every option of a built backend and fails when one is neither read by
runtime code nor listed here or in its definition. When a feature is built, its lines leave these tables.

A backend's options that nothing reads yet are listed by its definition (`not_built_options`,
retrain.backends.catalog); a backend that is not built at all is marked `available=False` and
refused when a run starts; `explain` still previews it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from retrain.backends import catalog
from retrain.config.errors import ConfigIssue
from retrain.config.fields import (
    CoerceError,
    FieldSpec,
    all_fields,
    coerce,
    get_value,
)
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted

NOT_BUILT_TEXT = "not built yet in this version"
DOTTED = "<dotted path>"  # in `values`: any dotted plugin path


@dataclass(frozen=True)
class NotBuilt:
    """A key ("section.key") or a whole section ("section") that nothing reads yet.

    Refused: any non-default value (`values` empty), or only the listed `values`, or the
    values `refuse` accepts. `what` names the feature ({value!r} is filled in); `instead` is
    the hint.
    """

    where: str
    what: str
    instead: str
    values: tuple[Any, ...] = ()
    refuse: Callable[[Any], bool] | None = None

    def refuses(self, spec: FieldSpec, value: Any) -> bool:
        if self.refuse is not None:
            return self.refuse(value)
        if self.values:
            return value in self.values or (DOTTED in self.values and isinstance(value, str) and is_dotted(value))
        return bool(value != spec.default)

    @property
    def doc(self) -> str:
        """One phrase for the configuration reference."""
        if self.values:
            shown = ", ".join("a dotted path" if v == DOTTED else f"`{v}`" for v in self.values)
            return f"**Not built yet:** {shown}."
        if self.refuse is not None:
            return f"**Not built yet:** {self.what}."
        return "**Not built yet:** only the default is accepted."


_INFERENCE = ("inference-engine tuning", "remove it; tune an inference server with its own flags")

NOT_BUILT: tuple[NotBuilt, ...] = (
    NotBuilt("inference.engine", "{value!r}", 'engine = "pytorch", "vllm", "sglang" or "openai"',
             values=("max", "trtllm", "mlx")),
    NotBuilt("inference.attention_kernel", *_INFERENCE),
    NotBuilt("inference.dtype", *_INFERENCE),
    NotBuilt("inference.kv_cache_dtype", *_INFERENCE),
    NotBuilt("inference.prefix_caching", *_INFERENCE),
    NotBuilt("environment.auto_install", "installing a missing taskset package (auto_install)",
             "install the taskset's package yourself (pip install <package>) before the run"),
    NotBuilt("logging.generation_top_surprisal_limit", "logging the most surprising tokens of a generation", "remove it"),
    NotBuilt("plugins.strict", "lenient plugin loading", "remove it; a plugin that fails to load is always an error"),
)

@cache
def _entries() -> dict[str, tuple[FieldSpec, NotBuilt]]:
    """Dotted key -> (field, entry), with section entries expanded to each of their keys."""
    out: dict[str, tuple[FieldSpec, NotBuilt]] = {}
    for spec in all_fields():
        for entry in NOT_BUILT:
            if entry.where in (spec.dotted, spec.section):
                out[spec.dotted] = (spec, entry)
    return out


def refused_keys() -> frozenset[str]:
    """Every dotted key some value of which is refused as not built."""
    return frozenset(_entries())


def not_built_doc(dotted: str) -> str:
    """The configuration reference's marker for a key, or ''."""
    found = _entries().get(dotted)
    return found[1].doc if found else ""


def live_values(dotted: str, names: Sequence[str]) -> list[str]:
    """`names` without the values of key `dotted` that are not built (for "available: ..." hints)."""
    found = _entries().get(dotted)
    if found is None:
        return list(names)
    spec, entry = found
    return [n for n in names if not entry.refuses(spec, n)]


def not_built_options(backend: str) -> Mapping[str, tuple[str, str]]:
    """The options its definition refuses as not built yet ({} for an unknown or missing backend)."""
    entry = None if is_dotted(backend) else catalog.lookup(backend)
    return entry.definition.not_built_options if entry is not None else {}


def option_built(backend: str, option: str) -> bool:
    return option not in not_built_options(backend)


def check_built(c: TrainConfig) -> list[ConfigIssue]:
    """The refusals. Reads `[backend.options]` as written, before defaults fill it."""
    errors: list[ConfigIssue] = []
    for spec, entry in _entries().values():
        value = get_value(c, spec)
        if entry.refuses(spec, value):
            errors.append(ConfigIssue(f"{entry.what.format(value=value)} is {NOT_BUILT_TEXT}", key=spec.label,
                                      hint=entry.instead))
    backend, options = c.backend.backend, c.backend.options
    found = None if is_dotted(backend) else catalog.lookup(backend)
    schema = (found.definition.option_schema if found is not None else None) or {}
    for key, (what, instead) in not_built_options(backend).items():
        if key in options and _asks_for(options[key], schema[key].value_type, schema[key].default):
            errors.append(ConfigIssue(f"{what} is {NOT_BUILT_TEXT}", key=f"[backend.options] {key}", hint=instead))
    return errors


def _asks_for(raw: Any, value_type: type, default: Any) -> bool:
    """True when `raw` asks for an unbuilt option's feature: a value other than the default
    and, for a switch, other than false (off: what runs). An uncoercible value is left to the
    option schema's own error."""
    try:
        value = coerce(value_type, raw)
    except CoerceError:
        return False
    return bool(value != default) and not (value_type is bool and value is False)


def drop_superseded(issues: list[ConfigIssue], refusals: list[ConfigIssue]) -> list[ConfigIssue]:
    """Issues of the other passes, minus those about keys of features that are not built: once
    a config asks for an unbuilt feature, its cross-field rules only add noise to the refusal.
    Keys that are wholly unbuilt (any non-default value refused) always go; partly live keys
    (trainer, engine, devices, ...) go only when this config's value was refused."""
    if not refusals:
        return issues
    labels = {i.key for i in refusals}
    for spec, entry in _entries().values():
        if not entry.values and entry.refuse is None:
            labels.add(spec.label)
    return [i for i in issues if i.key not in labels]
