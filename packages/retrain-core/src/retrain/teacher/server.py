"""A teacher behind an OpenAI-compatible server: vLLM, or `retrain serve`, scores given tokens
through `POST {url}/completions` with vLLM's `prompt_logprobs` extension.

One request per `batch_size` rows, at most `concurrency` in flight:
`{"model", "prompt": [[ids...], ...], "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}`;
choice i's `prompt_logprobs` holds, per prompt position, null (the first) or an object keyed by
token id whose entry for the prompt's own token has its `logprob` (vLLM adds the top
alternatives there; retrain reads the prompt token's alone). Requests go through the judge's
HTTP code: every wait bounded by `timeout_s`, retried `retries` times after a timeout, a
connection failure or 408/409/429/5xx (retrain.rewards.judge.retry). A request that still
fails stops the run, naming the server and the fault: training on without the teacher would
change the objective unannounced.

Teacher and student must tokenize alike (the teacher scores the student's token ids): at start
a probe text goes to the server with `return_token_ids`, and the ids it answers must be the
student tokenizer's.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from retrain.errors import UserError
from retrain.rewards.judge.endpoint import excerpt, json_headers, post_json
from retrain.rewards.judge.errors import Refused
from retrain.rewards.judge.retry import BACKOFF_S, Attempts, with_retries
from retrain.teacher.protocol import ScoreRow
from retrain.teacher.tokens import PROBE, mismatch

SERVICE = "a teacher"
NOT_SCORED = "a teacher reply without the prompt's logprobs"
#: vLLM spends about 100 bytes of JSON on each prompt token's logprob: a request of 64
#: sequences of 32k tokens stays far below; an endless body stops here
MAX_REPLY_BYTES = 1 << 30


class TeacherFailed(UserError, RuntimeError):
    """The teacher's server did not score a batch after its retries."""


class ServerTeacher:
    def __init__(self, url: str, model: str, *, api_key_env: str = "", timeout_s: float = 60.0, retries: int = 2,
                 batch_size: int = 16, concurrency: int = 4, backoff_s: float = BACKOFF_S) -> None:
        self.url = url.rstrip("/") + "/completions"
        self.model, self.timeout_s, self.retries = model, timeout_s, retries
        self.batch_size, self.backoff_s = batch_size, backoff_s
        self.name = f"{model} at {url}"
        # the key is read here and kept in the headers only: no message quotes it
        self._headers = json_headers(os.environ.get(api_key_env, "") if api_key_env else "")
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="retrain-teacher")
        self._requests = self._retries = 0
        self._latency_s = 0.0

    def check_tokenizer(self, student: Any, student_name: str) -> None:
        """Refuse a server whose tokenizer is not the student's (`student`: a Hugging Face
        tokenizer), naming both models."""
        want = [int(i) for i in student.encode(PROBE, add_special_tokens=True)]
        body = {"model": self.model, "prompt": PROBE, "max_tokens": 1, "temperature": 0, "return_token_ids": True}
        tries = self._post(body)
        self.metrics()  # the probe is no step's request
        if tries.value is None:
            raise self._failed(tries)
        try:
            got = [int(i) for i in tries.value["choices"][0]["prompt_token_ids"]]
        except (KeyError, IndexError, TypeError, ValueError):
            raise TeacherFailed(f"[teacher] url: {self.url} does not return the prompt's token ids "
                                "(return_token_ids), so the teacher's tokenizer cannot be checked",
                                hint="serve the teacher with vLLM or retrain serve") from None
        if got != want:
            raise mismatch(self.model, student_name, f"the server tokenizes a probe text as {len(got)} ids, "
                                                     f"the student as {len(want)}" if len(got) != len(want) else
                           f"first different id at position {_first_difference(got, want)}")

    def score(self, rows: Sequence[ScoreRow]) -> list[list[float]]:
        chunks = [list(rows[i:i + self.batch_size]) for i in range(0, len(rows), self.batch_size)]
        scored = list(self._pool.map(self._chunk, chunks))
        return [lps for chunk in scored for lps in chunk]

    def _chunk(self, rows: list[ScoreRow]) -> list[list[float]]:
        body = {"model": self.model, "prompt": [r.tokens for r in rows], "max_tokens": 1, "temperature": 0,
                "prompt_logprobs": 0}
        tries = self._post(body)
        if tries.value is None:
            raise self._failed(tries)
        try:
            return parse_prompt_logprobs(tries.value, rows)
        except Refused as e:
            raise TeacherFailed(f"[teacher] url: {self.url}: {e.kind}: {e}",
                                hint="serve the teacher with vLLM or retrain serve") from None

    def _post(self, body: dict[str, Any]) -> Attempts[Any]:
        def call() -> Any:
            raw = post_json(self.url, body, self._headers, self.timeout_s, service=SERVICE, too_large=NOT_SCORED,
                            max_bytes=MAX_REPLY_BYTES)
            try:
                return json.loads(raw)
            except ValueError:
                raise Refused(NOT_SCORED, f"HTTP 200 with body {excerpt(raw)}") from None

        tries = with_retries(call, self.retries, self.backoff_s)
        self._requests += tries.requests
        self._retries += tries.requests - 1
        self._latency_s += sum(tries.latencies)
        return tries

    def _failed(self, tries: Attempts[Any]) -> TeacherFailed:
        fault = tries.fault
        line = fault.line() if fault is not None else "no answer"
        return TeacherFailed(f"[teacher] url: {self.url} did not score the step's tokens after {tries.requests} "
                             f"tries: {line}", hint="check the teacher's server; resume the run once it answers")

    def metrics(self) -> dict[str, float]:
        out = {"teacher/requests": float(self._requests), "teacher/retries": float(self._retries),
               "teacher/latency_s": self._latency_s / self._requests if self._requests else 0.0}
        self._requests = self._retries = 0
        self._latency_s = 0.0
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def parse_prompt_logprobs(reply: Any, rows: Sequence[ScoreRow]) -> list[list[float]]:
    """Each row's logprobs from `start` on, read from a completions reply's `prompt_logprobs`
    (vLLM's layout); `Refused` when the reply lacks any of them."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or len(choices) != len(rows):
        raise Refused(NOT_SCORED, f"{len(choices) if isinstance(choices, list) else 'no'} choices for "
                                  f"{len(rows)} prompts")
    by_index = {c.get("index", i) if isinstance(c, dict) else i: c for i, c in enumerate(choices)}
    out: list[list[float]] = []
    for i, row in enumerate(rows):
        choice = by_index.get(i)
        entries = choice.get("prompt_logprobs") if isinstance(choice, dict) else None
        if not isinstance(entries, list) or len(entries) != len(row.tokens):
            raise Refused(NOT_SCORED, f"prompt {i}: prompt_logprobs "
                                      f"{'missing' if not isinstance(entries, list) else f'of length {len(entries)}'}"
                                      f" for {len(row.tokens)} tokens")
        lps = []
        for j in range(row.start, len(row.tokens)):
            entry = entries[j].get(str(row.tokens[j])) if isinstance(entries[j], dict) else None
            value = entry.get("logprob") if isinstance(entry, dict) else None
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise Refused(NOT_SCORED, f"prompt {i}, position {j}: no logprob for token {row.tokens[j]}")
            lps.append(float(value))
        out.append(lps)
    return out


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
