"""Back-pressure: adaptive batch size from a Universal Scalability Law fit plus roofline hints.

USL: C(p) = p / (1 + sigma(p - 1) + kappa p(p - 1)), throughput X(p) = lambda C(p), with
p = batch x group the step's concurrency. The fit is least squares on the linearised form
p / X = a + b p + c p^2 over the last 100 non-skipped steps. Past warmup the controller
throttles when p is beyond the throughput peak p* (retrograde) and grows the batch while p
is well below it; the group size is never changed.

Roofline: with `peak_gflops` and `peak_bw_gb_s` set, the regime says whether the step is
compute or memory bound by comparing the workload's arithmetic intensity with the device's
ridge point peak_gflops / peak_bw_gb_s (FLOP/byte). Decoding p sequences at once reads each
bf16 weight (2 bytes) once for 2 FLOPs per sequence, so the intensity is ~ C(p) FLOP/byte.
(The reference compared C(p) with peak_gflops x 1e9, mixing units, so it always said
memory_bound.)
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from retrain.config.schema import TrainConfig
from retrain.training.state import BackpressureState, NoopBackpressureState, UslBackpressureState

Action = Literal["hold", "throttle", "increase"]
Regime = Literal["warmup", "optimal", "retrograde", "compute_bound", "memory_bound"]

EPS = 1e-8
FIT_WINDOW = 100
MIN_GROUP, MAX_GROUP = 2, 64
COMPUTE_BOUND_RATIO = 0.7


def usl_capacity(p: float, sigma: float, kappa: float) -> float:
    denom = 1.0 + sigma * (p - 1.0) + kappa * p * (p - 1.0)
    return p / denom if denom > 0 else 0.0


def optimal_concurrency(sigma: float, kappa: float) -> float:
    return math.sqrt((1.0 - sigma) / kappa) if kappa > 0 and sigma < 1 else 1.0


@dataclass(frozen=True)
class StepObservation:
    batch_size: int
    group_size: int
    total_tokens: int  # prompt + completion tokens of every datum
    step_time_s: float  # the whole step's wall time
    skipped: bool = False


@dataclass(frozen=True)
class Recommendation:
    action: Action
    batch_size: int
    group_size: int
    regime: str
    utilization: float = 0.0
    p_star: float = 1.0
    sigma: float = 0.0
    kappa: float = 0.0
    throughput: float = 0.0
    warmup: bool = False

    def metrics(self) -> dict[str, Any]:
        return {
            "bp_warmup": self.warmup,
            "bp_action": self.action,
            "bp_regime": self.regime,
            "bp_p_star": self.p_star,
            "bp_sigma": self.sigma,
            "bp_kappa": self.kappa,
            "bp_utilization": self.utilization,
            "bp_throughput": self.throughput,
        }


class Backpressure(Protocol):
    def observe(self, obs: StepObservation) -> None: ...
    def recommend(self) -> Recommendation: ...
    def warmup_batch_size(self, batch_index: int) -> int | None: ...
    def state(self) -> BackpressureState: ...
    def load_state(self, state: BackpressureState) -> None: ...


class NoopBackpressure:
    """Disabled back-pressure: always holds."""

    def __init__(self, batch_size: int = 1, group_size: int = 1) -> None:
        self.batch_size, self.group_size = batch_size, group_size

    def observe(self, obs: StepObservation) -> None:
        self.batch_size, self.group_size = int(obs.batch_size), int(obs.group_size)

    def recommend(self) -> Recommendation:
        return Recommendation("hold", self.batch_size, self.group_size, "optimal")

    def warmup_batch_size(self, batch_index: int) -> int | None:
        return None

    def state(self) -> BackpressureState:
        return NoopBackpressureState()

    def load_state(self, state: BackpressureState) -> None:
        return None


def _as_size(value: Any, hi: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return 1
    return min(max(n, 1), hi)


class UslBackpressure:
    def __init__(
        self,
        *,
        warmup_steps: int = 10,
        ema_decay: float = 0.9,
        throttle_margin: float = 0.85,
        increase_margin: float = 0.5,
        min_batch_size: int = 1,
        max_batch_size: int = 64,
        peak_gflops: float = 0.0,
        peak_bw_gb_s: float = 0.0,
    ) -> None:
        self.warmup_steps = warmup_steps
        self.ema_decay = ema_decay
        self.throttle_margin = throttle_margin
        self.increase_margin = increase_margin
        self.min_batch, self.max_batch = min_batch_size, max(max_batch_size, min_batch_size)
        self.peak_gflops, self.peak_bw = peak_gflops, peak_bw_gb_s
        self.step_count = 0
        self.last_batch, self.last_group = 1, 1
        self.last_throughput = 0.0
        self.ema: float | None = None
        self.window: deque[tuple[float, float]] = deque(maxlen=FIT_WINDOW)
        self.lam, self.sigma, self.kappa, self.p_star = 0.0, 0.0, 0.0, 1.0
        self.fitted = False
        self.regime: str = "warmup"

    @classmethod
    def from_config(cls, config: TrainConfig) -> UslBackpressure:
        b = config.backpressure
        return cls(
            warmup_steps=b.warmup_steps,
            ema_decay=b.ema_decay,
            throttle_margin=b.throttle_margin,
            increase_margin=b.increase_margin,
            min_batch_size=b.min_batch_size,
            max_batch_size=b.max_batch_size,
            peak_gflops=b.peak_gflops,
            peak_bw_gb_s=b.peak_bw_gb_s,
        )

    # ------------------------------------------------------------------ observe

    def observe(self, obs: StepObservation) -> None:
        self.step_count += 1
        self.last_batch = _as_size(obs.batch_size, self.max_batch)
        self.last_group = _as_size(obs.group_size, MAX_GROUP)
        if obs.skipped:
            return
        p = float(self.last_batch * self.last_group)
        x = obs.total_tokens / obs.step_time_s if obs.step_time_s > EPS else 0.0
        self.last_throughput = x
        self.ema = x if self.ema is None else self.ema_decay * self.ema + (1 - self.ema_decay) * x
        self.window.append((p, x))
        if sum(1 for _, xi in self.window if xi >= EPS) >= 3:
            self._fit()
        self.regime = self._classify(p)

    def _fit(self) -> None:
        pts = [(p, p / x) for p, x in self.window if x >= EPS]
        s = [sum(p**k for p, _ in pts) for k in range(5)]
        sy = [sum(p**k * y for p, y in pts) for k in range(3)]
        m = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]
        det = _det3(m)
        if abs(det) < EPS:
            return
        coef = []
        for col in range(3):
            mc = [row[:] for row in m]
            for r in range(3):
                mc[r][col] = sy[r]
            coef.append(_det3(mc) / det)
        a, b, c = coef
        total = a + b + c
        if total < EPS:
            return
        self.lam = 1.0 / total
        self.sigma = min(max((b + c) / total, 0.0), 1.0)
        self.kappa = max(0.0, c / total)
        self.p_star = optimal_concurrency(self.sigma, self.kappa)
        self.fitted = True

    def _classify(self, p: float) -> str:
        if self.step_count <= self.warmup_steps:
            return "warmup"
        if self.kappa > EPS and p > self.p_star * self.throttle_margin and self.p_star > 1:
            return "retrograde"
        if self.peak_gflops > 0 and self.peak_bw > 0:
            ridge = self.peak_gflops / self.peak_bw
            intensity = usl_capacity(p, self.sigma, self.kappa)
            return "compute_bound" if intensity / ridge > COMPUTE_BOUND_RATIO else "memory_bound"
        if self.fitted and self.lam > EPS:
            # The latest observation, not the EMA: a lagging EMA during a ramp-up made the
            # reference report a false "retrograde".
            predicted = self.lam * usl_capacity(p, self.sigma, self.kappa)
            ratio = self.last_throughput / predicted if predicted > EPS else 1.0
            if ratio > 1.1:
                return "memory_bound"
            if ratio < 0.8:
                return "retrograde"
        return "optimal"

    # ------------------------------------------------------------------ recommend

    def utilization(self) -> float:
        """EMA throughput over the fitted peak lambda C(p*); 0 until the first fit."""
        peak = self.lam * usl_capacity(self.p_star, self.sigma, self.kappa)
        if not self.fitted or peak <= EPS or self.ema is None:
            return 0.0
        return self.ema / peak

    def recommend(self) -> Recommendation:
        def rec(action: Action, batch: int, utilization: float = 0.0) -> Recommendation:
            return Recommendation(
                action,
                batch,
                self.last_group,
                self.regime,
                utilization,
                self.p_star,
                self.sigma,
                self.kappa,
                self.ema or 0.0,
                self.regime == "warmup",
            )

        if self.regime == "warmup":
            return rec("hold", self.last_batch)
        lo, hi = self.min_batch * MIN_GROUP, self.max_batch * MAX_GROUP
        safe = self.p_star * self.throttle_margin
        safe = float(hi) if not math.isfinite(safe) else min(max(safe, lo), hi)
        target = min(max(int(safe // self.last_group), self.min_batch), self.max_batch)
        p = self.last_batch * self.last_group
        action: Action = "hold"
        batch = self.last_batch
        if self.regime == "retrograde":
            action, batch = "throttle", target
        elif p < safe * self.increase_margin:
            action, batch = "increase", target
        return rec(action, batch, self.utilization())

    def warmup_batch_size(self, batch_index: int) -> int | None:
        """The batch size of warmup step `batch_index`: a sweep min, 2min, 4min, ... max."""
        if batch_index >= self.warmup_steps:
            return None
        sizes = warmup_sizes(self.min_batch, self.max_batch)
        return sizes[batch_index % len(sizes)]

    # ------------------------------------------------------------------ checkpoint

    def state(self) -> BackpressureState:
        return UslBackpressureState(
            step_count=self.step_count, last_batch=self.last_batch, last_group=self.last_group,
            last_throughput=self.last_throughput, ema=self.ema, window=list(self.window), lam=self.lam,
            sigma=self.sigma, kappa=self.kappa, p_star=self.p_star, fitted=self.fitted, regime=self.regime)

    def load_state(self, state: BackpressureState) -> None:
        if not isinstance(state, UslBackpressureState):
            raise ValueError(f"not a USL back-pressure state: kind {type(state).__name__}")
        self.step_count, self.last_batch, self.last_group = state.step_count, state.last_batch, state.last_group
        self.last_throughput, self.ema = state.last_throughput, state.ema
        self.window = deque(state.window, maxlen=FIT_WINDOW)
        self.lam, self.sigma, self.kappa, self.p_star = state.lam, state.sigma, state.kappa, state.p_star
        self.fitted, self.regime = state.fitted, state.regime


def _det3(m: list[list[float]]) -> float:
    return (
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    )


def warmup_sizes(min_batch: int, max_batch: int) -> list[int]:
    sizes = []
    size = max(min_batch, 1)
    while size <= max_batch:
        sizes.append(size)
        size *= 2
    if not sizes or sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


def adjust(bp: Backpressure, enabled: bool, sizes: tuple[int, int], tokens: int, step_time_s: float, *,
           skipped: bool) -> tuple[tuple[int, int], dict[str, Any]]:
    """Feed one step to the controller; the (batch, group) sizes of the next step and the
    `bp_*` metrics when back-pressure is enabled, else the same sizes and no metrics (the
    controller still observes, so turning it on at a resume has a history)."""
    bp.observe(StepObservation(sizes[0], sizes[1], tokens, step_time_s, skipped=skipped))
    rec = bp.recommend()
    if not enabled:
        return sizes, {}
    return (rec.batch_size, rec.group_size), rec.metrics()


def build_backpressure(config: TrainConfig) -> Backpressure:
    """`usl` when [backpressure] enabled, else `noop`."""
    if config.backpressure.enabled:
        return UslBackpressure.from_config(config)
    return NoopBackpressure(config.training.batch_size, config.training.group_size)
