"""The flat field table derived from the schema, and value coercion shared by TOML and CLI.

Every TrainConfig field has a section, a TOML key, and a flat name (the reference's dataclass
field name). The flat name gives the CLI flag (`--optim-beta1`) and the key used in campaign
condition overrides and snapshots.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

from retrain.config.schema import SECTIONS, Section, TrainConfig

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True, eq=False)  # identity hash: specs are cached singletons
class FieldSpec:
    section: str
    key: str  # TOML key
    attr: str  # attribute on the section struct (differs from key only for `[resume] from`)
    flat: str  # reference field name; the CLI flag is --flat-with-dashes
    type: Any
    default: Any
    description: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.flat.replace("_", "-")

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def label(self) -> str:
        return f"[{self.section}] {self.key}"

    @property
    def is_bool(self) -> bool:
        """A boolean (`bool`, or `bool | None` whose None means unset): a bare flag is true."""
        return self.type is bool or set(get_args(self.type)) == {bool, type(None)}

    @property
    def is_mapping(self) -> bool:
        return get_origin(self.type) is dict

    @property
    def choices(self) -> tuple[str, ...] | None:
        if get_origin(self.type) is Literal:
            return tuple(str(a) for a in get_args(self.type))
        return None

    def type_name(self) -> str:
        return type_name(self.type)

    def bounds_text(self) -> str:
        parts = []
        if self.gt is not None:
            parts.append(f"> {_num(self.gt)}")
        if self.ge is not None:
            parts.append(f">= {_num(self.ge)}")
        if self.lt is not None:
            parts.append(f"< {_num(self.lt)}")
        if self.le is not None:
            parts.append(f"<= {_num(self.le)}")
        return " and ".join(parts)

    def check_bounds(self, value: Any) -> str | None:
        """The bound `value` breaks, as text ('must be > 0'), or None."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        if self.gt is not None and not value > self.gt:
            return f"must be > {_num(self.gt)}"
        if self.ge is not None and not value >= self.ge:
            return f"must be >= {_num(self.ge)}"
        if self.lt is not None and not value < self.lt:
            return f"must be < {_num(self.lt)}"
        if self.le is not None and not value <= self.le:
            return f"must be <= {_num(self.le)}"
        return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "str"
    if origin is dict:
        return "table"
    if origin is list:
        (inner,) = get_args(tp)
        return f"list[{type_name(inner)}]"
    if origin in (Union, types.UnionType):
        # `X | None`: None is the "unset" default, never a value a file can hold
        return " | ".join(type_name(a) for a in get_args(tp) if a is not type(None))
    return getattr(tp, "__name__", str(tp))


def _strip_annotated(tp: Any) -> Any:
    return get_args(tp)[0] if get_origin(tp) is typing.Annotated else tp


@cache
def all_fields() -> tuple[FieldSpec, ...]:
    """Every TrainConfig field in schema order."""
    out: list[FieldSpec] = []
    hints = {name: typing.get_type_hints(cls, include_extras=True) for name, cls in SECTIONS.items()}
    for section, cls in SECTIONS.items():
        info = msgspec.inspect.type_info(cls)
        assert isinstance(info, msgspec.inspect.StructType)
        prefix = cls._prefix
        for f in info.fields:
            meta = _meta_of(hints[section][f.name])
            extra = (meta.extra or {}) if meta else {}
            default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
            out.append(
                FieldSpec(
                    section=section,
                    key=f.encode_name,
                    attr=f.name,
                    flat=extra.get("flag") or prefix + f.encode_name,
                    type=_strip_annotated(hints[section][f.name]),
                    default=default,
                    description=(meta.description or "") if meta else "",
                    ge=getattr(meta, "ge", None),
                    gt=getattr(meta, "gt", None),
                    le=getattr(meta, "le", None),
                    lt=getattr(meta, "lt", None),
                )
            )
    return tuple(out)


def _meta_of(hint: Any) -> msgspec.Meta | None:
    if get_origin(hint) is typing.Annotated:
        for m in get_args(hint)[1:]:
            if isinstance(m, msgspec.Meta):
                return m
    return None


@cache
def by_flat() -> dict[str, FieldSpec]:
    return {f.flat: f for f in all_fields()}


@cache
def by_section() -> dict[str, dict[str, FieldSpec]]:
    out: dict[str, dict[str, FieldSpec]] = {s: {} for s in SECTIONS}
    for f in all_fields():
        out[f.section][f.key] = f
    return out


class CoerceError(ValueError):
    """A value that cannot become the field's type; the message says what was expected."""


def coerce(spec_type: Any, value: Any, *, from_text: bool = False) -> Any:
    """Turn a TOML value (or, with from_text, a CLI string) into the field's type.

    Booleans accept true/false/yes/no/on/off/1/0 in any case (the reference used Python
    truthiness for TOML, so `"false"` meant True; we parse it). Integers accept integral
    floats and numeric strings but never booleans or fractions (the reference truncated).
    """
    tp = _strip_annotated(spec_type)
    origin = get_origin(tp)
    if origin is Literal:
        return _to_choice(tp, value)
    if origin in (Union, types.UnionType):
        return _to_union(tp, value, from_text)
    if origin is None and tp in _SCALARS:
        return _SCALARS[tp](value)
    if origin is list:
        return _to_list(tp, value, from_text)
    if origin is dict:
        return _to_table(value)
    raise CoerceError(f"unsupported field type {tp!r}")


def _to_choice(tp: Any, value: Any) -> str:
    choices = [str(a) for a in get_args(tp)]
    if isinstance(value, str) and value in choices:
        return value
    raise CoerceError(f"must be one of {', '.join(choices)}")


def _to_union(tp: Any, value: Any, from_text: bool) -> Any:
    """The first member type (None aside) that takes the value; else the last member's error."""
    last: CoerceError | None = None
    for arg in get_args(tp):
        if arg is type(None):
            continue
        try:
            return coerce(arg, value, from_text=from_text)
        except CoerceError as exc:
            last = exc
    raise last or CoerceError("unsupported value")


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise CoerceError("expected a boolean (true or false)")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise CoerceError("expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            try:
                f = float(value)
            except ValueError:
                raise CoerceError("expected an integer") from None
            if f.is_integer():
                return int(f)
    raise CoerceError("expected an integer")


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise CoerceError("expected a number, got a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise CoerceError("expected a number")


def _to_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise CoerceError("expected a string")


_SCALARS: dict[Any, Callable[[Any], Any]] = {bool: _to_bool, int: _to_int, float: _to_float, str: _to_str}


def _to_list(tp: Any, value: Any, from_text: bool) -> list[Any]:
    """A list, a JSON array string, or comma-separated text; each item coerced to the item type."""
    (inner,) = get_args(tp)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise CoerceError("expected a JSON array") from None
        else:
            value = [p.strip() for p in text.split(",") if p.strip()]
    if not isinstance(value, list):
        raise CoerceError(f"expected a list of {type_name(inner)}")
    out = []
    for i, item in enumerate(value):
        try:
            out.append(coerce(inner, item, from_text=from_text))
        except CoerceError as exc:
            raise CoerceError(f"item {i}: {exc}") from None
    return out


def _to_table(value: Any) -> dict[Any, Any]:
    """A table, or a JSON object string ('' is the empty table)."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise CoerceError("expected a table or a JSON object string") from None
    if not isinstance(value, dict):
        raise CoerceError("expected a table")
    return dict(value)


def parse_typed_scalar(text: str) -> Any:
    """Value of a `--algorithm-param k=v` style flag: bool, JSON, int, float, else string.

    Unlike the reference (which keyed float detection on a '.'), `1e-4` is a float.
    """
    t = text.strip()
    if t == "":
        return ""
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t[:1] in "[{":
        try:
            return json.loads(t)
        except json.JSONDecodeError:
            return text
    try:
        return int(t)
    except ValueError:
        pass
    try:
        f = float(t)
    except ValueError:
        return text
    return f if math.isfinite(f) else text


def parse_devices(devices: str) -> list[str]:
    """`[backend] devices` as a list: "gpu:0, cpu" -> ["gpu:0", "cpu"]."""
    return [d.strip() for d in devices.split(",") if d.strip()]


def get_value(config: TrainConfig, spec: FieldSpec) -> Any:
    return getattr(getattr(config, spec.section), spec.attr)


def flat_dict(config: TrainConfig) -> dict[str, Any]:
    """{flat field name: value} for every field (the reference's TrainConfig view)."""
    return {f.flat: get_value(config, f) for f in all_fields()}


def with_values(config: TrainConfig, values: dict[FieldSpec, Any]) -> TrainConfig:
    """A copy of `config` with the given fields replaced (values already coerced)."""
    per_section: dict[str, dict[str, Any]] = {}
    for spec, value in values.items():
        per_section.setdefault(spec.section, {})[spec.attr] = value
    changes: dict[str, Section] = {
        section: msgspec.structs.replace(getattr(config, section), **attrs)
        for section, attrs in per_section.items()
    }
    return msgspec.structs.replace(config, **changes)
