"""`[reward] judge_client = "verifiers"`: the verifiers package's reference-answer judge
(`verifiers.v1.judges.ReferenceJudge`, the successor of the `JudgeRubric` the reference
implementation called) asks the question with its own template and OpenAI client and parses the
verdict its own way: a reply that names neither label raises, and is counted as a reward error.

Registered as `judge` in the `retrain.rewards` entry-point group: retrain-core's judge
(retrain.rewards.judge) builds it with `(base_url, model, api_key_env, timeout_s)` and calls
`ask` from its worker threads, after mapping verifiers' errors onto its own so that retries,
timeouts and fault counting are the same for both clients. `timeout_s` bounds the whole of one
`ask` (the OpenAI client's own timeouts bound each wait only), as it does retrain's own client;
the reply's size is the OpenAI client's to bound, which reads it whole.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai

from retrain.rewards.judge.errors import NOT_A_COMPLETION, REQUEST_REFUSED, Refused, Retryable
from retrain.rewards.judge.verdict import Verdict
from verifiers.v1.configs.client import ClientTimeoutConfig
from verifiers.v1.judges import ReferenceJudge, ReferenceJudgeConfig

RETRY_STATUS = frozenset({408, 409, 429})


class VerifiersJudge:
    client = "verifiers"

    def __init__(self, base_url: str, model: str, api_key_env: str, timeout_s: float) -> None:
        wait = ClientTimeoutConfig(connect=timeout_s, read=timeout_s, write=timeout_s, pool=timeout_s)
        self.judge: Any = ReferenceJudge(ReferenceJudgeConfig(model=model, base_url=base_url,
                                                              api_key_var=api_key_env, timeout=wait))
        self.timeout_s = timeout_s

    def ask(self, prompt: str, reference: str, response: str) -> Verdict:
        try:
            result = asyncio.run(asyncio.wait_for(
                self.judge.evaluate(question=prompt, answer=reference, response=response, positive="yes",
                                    negative="no"), self.timeout_s))
        except (openai.APITimeoutError, TimeoutError):
            raise Retryable(f"no reply within {self.timeout_s:g}s", timeout=True) from None
        except openai.APIConnectionError as e:
            raise Retryable(str(e)) from None
        except openai.APIStatusError as e:
            if e.status_code in RETRY_STATUS or e.status_code >= 500:
                raise Retryable(f"HTTP {e.status_code}: {e.message}") from None
            raise Refused(REQUEST_REFUSED, f"HTTP {e.status_code}: {e.message}") from None
        except (ValueError, RuntimeError, openai.APIResponseValidationError) as e:
            raise Refused(NOT_A_COMPLETION, str(e)) from None
        return Verdict(float(result.parsed))
