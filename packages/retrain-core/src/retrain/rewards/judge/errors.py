"""How a judge request fails: `Retryable` (the judge may answer next time: a timeout, a refused
connection, 408/409/429/5xx), or `Refused` (it will not: the request or the reply is wrong).
Each carries the `RewardFault` kind it is counted under when it is the item's last word.

The same errors serve every client built on the judge's HTTP code (`endpoint.post_json`): a
reward model's server and a distillation teacher's; `service` names which in the kind."""

from __future__ import annotations


class JudgeError(Exception):
    kind = "a judge failure"


class Retryable(JudgeError):
    def __init__(self, message: str, *, timeout: bool = False, retry_after: float | None = None,
                 service: str = "a judge") -> None:
        super().__init__(message)
        self.timeout, self.retry_after, self.service = timeout, retry_after, service

    @property
    def kind(self) -> str:  # type: ignore[override]
        return f"{self.service} that did not answer" if self.timeout else f"{self.service} that could not be reached"


class Refused(JudgeError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self._kind = kind

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self._kind


NOT_A_COMPLETION = "a judge reply that is not a chat completion"
REQUEST_REFUSED = "a judge request the server refused"
