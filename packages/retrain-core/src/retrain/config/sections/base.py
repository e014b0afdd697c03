"""What every section is built from: `Section` (a TOML table whose fields are the TOML keys)
and `F`, a field's metadata: its meaning, its bounds and the reference's flat name."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
from msgspec import Meta


def F(
    description: str,
    *,
    flag: str | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Meta:
    """Field metadata: meaning, bounds, and the reference's flat name when it is irregular."""
    extra = {"flag": flag} if flag else None
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    meta: Meta = Meta(description=description, extra=extra, **bounds)  # type: ignore[call-overload]
    return meta


JsonTable = dict[str, Any]


class Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A TOML section. `_prefix` + key gives the flat (reference) field name."""

    _prefix: ClassVar[str] = ""
