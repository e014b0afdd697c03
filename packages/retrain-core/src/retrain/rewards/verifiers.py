r"""The verifier-backed reward `math` (math-verify); the LLM judge is retrain.rewards.judge.

`math`: symbolic equivalence of the last `\boxed{}` and the reference. Both sides are parsed as `\boxed{...}` LaTeX; 1.0 iff math-verify says they are equal.
math-verify bounds its own parsing with SIGALRM timeouts, which only work on a process's
main thread: the scorer therefore runs this reward in worker processes (`isolation =
"process"`), where a runaway comparison is also killed at the per-item timeout.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from retrain.registry.health import COMPONENTS, module_available
from retrain.rewards.boxed import extract_boxed
from retrain.rewards.types import RewardUnavailable

INSTALL_HINT = COMPONENTS["math"].hint


def require_math_verify() -> None:
    if not module_available("math_verify"):
        raise RewardUnavailable(
            f"reward type 'math' needs the 'math-verify' package: {INSTALL_HINT}"
        )


class MathReward:
    def __init__(self, parse_timeout: int = 5) -> None:
        require_math_verify()
        import math_verify  # type: ignore[import-untyped]

        self._mv: Any = math_verify
        self._extraction = [math_verify.LatexExtractionConfig()]
        self.parse_timeout = parse_timeout
        self._parse_reference = lru_cache(maxsize=4096)(self._parse)

    def _timeout(self) -> int | None:
        return self.parse_timeout if threading.current_thread() is threading.main_thread() else None

    def _parse(self, latex: str) -> Any:
        return self._mv.parse(
            "\\boxed{" + latex + "}",
            extraction_config=self._extraction,
            parsing_timeout=self._timeout(),
        )

    def extract_answer(self, response: str) -> str:
        return extract_boxed(response)

    def score(self, response: str, reference: str) -> float:
        given = extract_boxed(response)
        if not given:
            return 0.0
        gold = self._parse_reference(reference.strip())
        pred = self._parse(given)
        if not gold or not pred:
            return 0.0
        return 1.0 if self._mv.verify(gold, pred, timeout_seconds=self._timeout()) else 0.0
