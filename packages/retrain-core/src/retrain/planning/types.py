"""What a planning-token detector is: decoded token strings in, one 0/1 flag per token out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from retrain.errors import UserError

Mask = NDArray[np.int8]


@runtime_checkable
class PlanningDetector(Protocol):
    def mask(self, tokens: Sequence[str]) -> Mask: ...


class PlanningUnavailable(UserError, RuntimeError):
    """A detector that cannot be built here (a missing optional package)."""
