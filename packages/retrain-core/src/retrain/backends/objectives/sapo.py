"""sapo: -(4 / tau) sigmoid(tau (r - 1)) A, tau = sapo_temperature_pos when A > 0, else
sapo_temperature_neg (TRL's loss_type "sapo"): a soft gate instead of a clip."""

from __future__ import annotations

from typing import Any

from retrain.backends.objective import LossTerms, Objective


def loss(settings: Any, terms: LossTerms) -> Any:
    xp, ratio, adv = terms.xp, terms.ratio, terms.adv
    # where() of two Python floats is float32 (torch's default dtype), then cast: the
    # temperatures are rounded to float32 whatever the ratio's dtype
    tau = xp.where(adv > 0, settings.sapo_temperature_pos, settings.sapo_temperature_neg).to(ratio.dtype)
    return -xp.sigmoid(tau * (ratio - 1)) * (4 / tau) * adv


OBJECTIVE = Objective("sapo", loss, "a soft sigmoid gate on the ratio instead of a clip",
                      reads=("sapo_temperature_pos", "sapo_temperature_neg"))
