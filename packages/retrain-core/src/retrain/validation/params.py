"""The free-form tables of `[algorithm]` against what reads them.

`[algorithm.transform_params]`, `[algorithm.advantage_params]` and `[algorithm.params]` (with
its nested `transform_params` table) are handed to the parts of the advantage pipeline the
config selects, and `[algorithm.params]` to the ttt_discover trainer as well. A key is live
only when one of those parts reads it:

- a built-in part says which keys it reads beside the code that reads them: a transform's
  `Transform.param_keys`, an algorithm_mode recipe's `Recipe.param_keys` (and every recipe
  reads its nested `transform_params`), the ttt_discover runner's `DISCOVER_PARAMS`; the
  uncertainty selectors (`SELECTOR_KEYS`) are read wherever the uncertainty kind may be set,
  and `mode` checks them;
- a plugin says so with an attribute `param_keys` on the object its path names
  (`retrain.plugins.signature.declared_param_keys`); one that says nothing reads its table as
  it likes, so that table goes to it unchecked (`retrain explain` and the docs say so).

A key that none of this config's readers reads is a warning when a built-in part reads it in
another configuration (naming which, as `inert` does for keys of a feature left off), and an
error otherwise, with the closest key as a guess: a typo, or a key of nothing, is refused,
never ignored. Loading runs this pass, so a run, `retrain explain` and `retrain trace` refuse
the same keys. It stands in for the option schema plugins will declare (one mechanism for
every plugin kind); what it reads of each part is that part's `param_keys`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrain.advantages.algorithm import BUILTIN_ALGORITHMS
from retrain.advantages.transform import BUILTIN_TRANSFORMS, MASK_RHO_KEYS
from retrain.advantages.uncertainty import SELECTOR_KEYS
from retrain.config.errors import ConfigIssue, did_you_mean
from retrain.config.schema import TrainConfig
from retrain.plugins.resolve import is_dotted
from retrain.plugins.signature import declared_param_keys
from retrain.registry import builtin
from retrain.registry.core import lookup
from retrain.validation.discover import DISCOVER_PARAMS

TRANSFORM_TABLE = "[algorithm.transform_params]"
NESTED_TABLE = "[algorithm.params.transform_params]"
ADVANTAGE_TABLE = "[algorithm.advantage_params]"
PARAMS_TABLE = "[algorithm.params]"
DISCOVER_TRAINER = 'trainer = "ttt_discover"'


@dataclass(frozen=True)
class Reader:
    what: str  # "transform 'gtpo'"
    keys: frozenset[str] | None  # None: a plugin that does not say; its table goes unchecked


@dataclass(frozen=True)
class Table:
    label: str
    values: Mapping[str, Any]
    readers: Sequence[Reader]
    accepted: frozenset[str] = frozenset()  # read wherever this table is, and checked elsewhere

    @property
    def checked(self) -> bool:
        return all(r.keys is not None for r in self.readers)

    def live(self) -> frozenset[str]:
        return self.accepted.union(*(r.keys or () for r in self.readers))

    def who(self) -> str:
        return " or ".join(r.what for r in self.readers)


@dataclass
class _Keys:
    """What each part a name selects says it reads; plugins only when they may be imported."""

    search_paths: Sequence[str]
    imports: bool
    problems: list[ConfigIssue] = field(default_factory=list)

    def of(self, kind: str, name: str, label: str) -> frozenset[str] | None:
        builtin_name = name in builtin.TARGETS.get(kind, {})
        if not builtin_name and not self.imports:
            return None
        try:
            obj = lookup(kind, name, self.search_paths).obj
        except Exception:  # an unknown name or a plugin that does not import: `mode` and `plugins` say so
            return None
        if builtin_name:
            keys: frozenset[str] = getattr(obj, "param_keys", None) or frozenset()
            return keys
        try:
            return declared_param_keys(obj)
        except TypeError as exc:
            self.problems.append(ConfigIssue(f"plugin {name!r}: {exc}", key=label))
            return None


def known_readers() -> dict[str, dict[str, str]]:
    """table label -> key -> the built-in parts that read it in some configuration, in words."""
    transform: dict[str, list[tuple[str, str]]] = {}
    for t in BUILTIN_TRANSFORMS.values():
        for key in sorted(t.param_keys or ()):
            transform.setdefault(key, []).append(("transform", t.name))
    params: dict[str, list[tuple[str, str]]] = {key: [(DISCOVER_TRAINER, "")] for key in DISCOVER_PARAMS}
    for name, recipe in BUILTIN_ALGORITHMS.items():
        for key in sorted(recipe.param_keys):
            params.setdefault(key, []).append(("algorithm_mode", name))
    for key in ("transform_params", *SELECTOR_KEYS):
        params.setdefault(key, []).append(("an algorithm_mode", ""))
    words = {key: _listed(parts) for key, parts in transform.items()}
    return {TRANSFORM_TABLE: words, NESTED_TABLE: words, ADVANTAGE_TABLE: {},
            PARAMS_TABLE: {key: _listed(parts) for key, parts in params.items()}}


def _listed(parts: list[tuple[str, str]]) -> str:
    """[("transform", "a"), ("transform", "b"), ("x", "")] -> "transform 'a' or 'b', or x"."""
    kinds: dict[str, list[str]] = {}
    for kind, name in parts:
        kinds.setdefault(kind, []).extend([repr(name)] if name else [])
    said = [f"{kind} {' or '.join(names)}".strip() if len(names) < 3
            else f"{kind} {', '.join(names[:-1])} or {names[-1]}" for kind, names in kinds.items()]
    return ", or ".join(said)


def tables(c: TrainConfig, keys: _Keys) -> list[Table]:
    """Each free-form table of `[algorithm]` with the readers this config gives it."""
    a = c.algorithm
    nested = a.params.get("transform_params")
    nested = nested if isinstance(nested, dict) else {}
    discover = [Reader(DISCOVER_TRAINER, frozenset(DISCOVER_PARAMS))] if c.training.trainer == "ttt_discover" else []
    recipe = BUILTIN_ALGORITHMS.get(a.algorithm_mode) if a.algorithm_mode else None
    selectors = frozenset(SELECTOR_KEYS)
    if a.algorithm_mode and recipe is None:  # a plugin: all three tables are handed to it
        plugin = f"algorithm plugin {a.algorithm_mode!r}"
        own = keys.of("algorithm_mode", a.algorithm_mode, "[algorithm] algorithm_mode")
        passed = Reader(plugin, None)
        return [Table(PARAMS_TABLE, a.params, [Reader(plugin, own | {"transform_params"} if own is not None else None),
                                               *discover], selectors),
                Table(TRANSFORM_TABLE, a.transform_params, [passed]),
                Table(NESTED_TABLE, nested, [passed]),
                Table(ADVANTAGE_TABLE, a.advantage_params, [passed])]
    advantage, transform = (recipe.advantage, recipe.transform) if recipe else (a.advantage_mode, a.transform_mode)
    transform_keys = keys.of("transform_mode", transform, "[algorithm] transform_mode")
    readers = [Reader(f"transform {transform!r}", transform_keys)]
    if is_dotted(a.uncertainty_kind) and (transform in builtin.GTPO_TRANSFORMS or transform not in builtin.TRANSFORM_MODES):
        readers.append(Reader(f"uncertainty plugin {a.uncertainty_kind!r}",
                              keys.of("uncertainty_kind", a.uncertainty_kind, "[algorithm] uncertainty_kind")))
    advantage_keys = frozenset() if advantage == "discover_entropic" else keys.of(
        "advantage_mode", advantage, "[algorithm] advantage_mode")
    out = [Table(TRANSFORM_TABLE, a.transform_params, readers, selectors),
           Table(ADVANTAGE_TABLE, a.advantage_params, [Reader(f"advantage mode {advantage!r}", advantage_keys)])]
    if recipe is not None:
        rho = (transform_keys or frozenset()) & MASK_RHO_KEYS  # handed on to the transform
        mode = Reader(f"algorithm_mode {a.algorithm_mode!r}", recipe.param_keys | {"transform_params"} | rho)
        out += [Table(NESTED_TABLE, nested, readers, selectors), Table(PARAMS_TABLE, a.params, [mode, *discover],
                                                                         selectors)]
    else:  # the nested table's uncertainty selector is read (mode); the rest only under a recipe
        out += [Table(NESTED_TABLE, nested, [], selectors), Table(PARAMS_TABLE, a.params, discover)]
    return out


def check_param_tables(c: TrainConfig, *, import_plugins: bool = True) -> tuple[list[ConfigIssue], list[ConfigIssue]]:
    """(errors, warnings) of the keys of `[algorithm]`'s free-form tables that nothing here reads."""
    keys = _Keys(c.plugins.search_paths, import_plugins)
    known = known_readers()
    errors: list[ConfigIssue] = []
    warnings: list[ConfigIssue] = []
    for table in tables(c, keys):
        if not table.values or not table.checked:
            continue
        live = table.live()
        for key in table.values:
            if key in live:
                continue
            where = f"{table.label} {key}"
            who = f"not read by {table.who()}" if table.readers else f"not read: nothing in this config reads {table.label}"
            readers_elsewhere = known[table.label].get(key)
            if readers_elsewhere:
                warnings.append(ConfigIssue(who, key=where, hint=f"read by {readers_elsewhere}; or remove it"))
                continue
            here = sorted(live)
            guess = did_you_mean(key, [*here, *known[table.label]])
            listing = (f"keys read here: {', '.join(here)}" if here
                       else f"{table.who() or 'nothing here'} reads no key of this table")
            errors.append(ConfigIssue(f"unknown key, {who}", key=where, hint=f"{guess} {listing}".strip()))
    return keys.problems + errors, warnings
