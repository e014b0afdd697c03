"""The clip band of each `[training] policy_loss_mode`, shared by every backend that computes it.

The local backend clips its ratios with it (retrain.backends.local.loss) and the Tinker
backend sends it as the thresholds of the service's `ppo` and `cispo` losses, so both clip
alike. The ratio is the token's, or the completion's at `importance_sampling_level =
"sequence"` (GSPO); the band does not depend on the level.
"""

from __future__ import annotations

#: cispo's cap on its weight when the config sets neither clip_eps nor clip_eps_high: 5, the
#: truncation ScaleRL (Khatri et al. 2025) uses for CISPO and TRL recommends as its cispo
#: `epsilon_high`. MiniMax-M1 tunes only the upper side and publishes no value; Tinker's cispo
#: defaults to 4, NeMo RL's to 6; on-policy the ratio is 1 and any of them leaves the step alone.
CISPO_DEFAULT_CAP = 5.0


def clip_band(mode: str, clip_eps: float, clip_eps_high: float) -> tuple[float, float] | None:
    """(lo, hi) of the ratio's clip under `mode`, or None when the mode does not clip.

    standard: [1 - clip_eps, 1 + (clip_eps_high or clip_eps)] when clip_eps > 0 (PPO; GSPO at
    sequence level), else no clip. clip_cov: eps_low = clip_eps, or 1 when 0; eps_high =
    clip_eps_high, or eps_low when 0 (spec algorithms.md §9.1). cispo: the clip of its
    stop-gradient weight, [1 - clip_eps, 1 + (clip_eps_high or clip_eps)], where clip_eps = 0
    means no lower bound (0; MiniMax-M1 sets none, TRL's cispo has none) and both 0 mean the
    cap CISPO_DEFAULT_CAP. kl_cov and sapo do not clip.
    """
    if mode == "standard":
        if clip_eps <= 0:
            return None
        return 1.0 - clip_eps, 1.0 + (clip_eps_high or clip_eps)
    if mode == "clip_cov":
        low = clip_eps if clip_eps > 0 else 1.0
        return 1.0 - low, 1.0 + (clip_eps_high or low)
    if mode == "cispo":
        high = clip_eps_high or clip_eps
        return (1.0 - clip_eps if clip_eps > 0 else 0.0), (1.0 + high if high > 0 else CISPO_DEFAULT_CAP)
    return None
