"""Per-completion surprisal normalisation for the Delight gates (`delight_norm_mode`).

`scale` divides by the population std, `mad_scale` by 1.4826 x the median absolute deviation
(falling back to `scale` when the MAD is ~0). Neither centres: surprisal is right-skewed and
its zero point (a certain token) is meaningful. Completions with fewer than two tokens, or a
std below 1e-8, are returned unscaled.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from retrain.advantages.ragged import Floats, Ragged

NormMode = Literal["none", "scale", "mad_scale"]
NORM_MODES: tuple[NormMode, ...] = ("none", "scale", "mad_scale")
STD_FLOOR = 1e-8
MAD_CONSTANT = 1.4826


def _divide(layout: Ragged, s: Floats, divisor: Floats, usable: np.ndarray) -> Floats:
    safe = np.where(usable, divisor, 1.0)
    return np.where(layout.expand(usable), s / layout.expand(safe), s)


def normalize(layout: Ragged, s: Floats, mode: NormMode) -> Floats:
    if mode == "none" or layout.total == 0:
        return s
    std = layout.std(s)
    long_enough = layout.lengths >= 2
    by_std = long_enough & (std >= STD_FLOOR)
    if mode == "scale":
        return _divide(layout, s, std, by_std)
    med = layout.median(s)
    robust = MAD_CONSTANT * layout.median(np.abs(s - layout.expand(med)))
    by_mad = long_enough & (robust >= STD_FLOOR)
    divisor = np.where(by_mad, robust, std)
    return _divide(layout, s, divisor, by_mad | by_std)
