"""`[teacher]`: on-policy distillation, a teacher that scores every sampled token."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from retrain.config.sections.base import F, Section

TeacherDtype = Literal["float32", "bfloat16", "float16"]


class TeacherConfig(Section):
    _prefix: ClassVar[str] = "teacher_"
    model: Annotated[
        str, F("The teacher: a checkpoint loaded beside the student (a folder, a hub id, or \"tiny\"), or, with url "
               "set, the name the server serves it under. Empty = no teacher (no distillation).")
    ] = ""
    adapter: Annotated[
        str, F("A local teacher's trained weights on top of model: a LoRA adapter folder, or a folder of full "
               "weights a retrain run saved (train_full_model). Empty = model as it is.")
    ] = ""
    url: Annotated[
        str, F("An OpenAI-compatible server that scores given tokens (http(s)://host[:port]/v1): vLLM, or "
               "retrain serve, through /completions with prompt_logprobs. Empty = a local teacher.")
    ] = ""
    api_key_env: Annotated[
        str, F("Environment variable that holds the server's API key (never the key itself); empty or unset "
               "sends no key.")
    ] = ""
    kl_coef: Annotated[
        float, F("Weight of the teacher's per-token term, -(logp_student - logp_teacher) of each sampled token "
                 "(the reverse KL's sample), added to the token advantages.", gt=0)
    ] = 1.0
    reward_coef: Annotated[
        float, F("Weight of the task reward's advantages beside the teacher's term; 0 = pure distillation (the "
                 "reward is still computed and logged).", ge=0)
    ] = 1.0
    dtype: Annotated[
        TeacherDtype, F("A local teacher's weights' dtype, whatever the student's.")
    ] = "float32"
    device: Annotated[
        Literal["student", "cpu"], F("Where a local teacher runs: the student's first device, or the CPU.")
    ] = "student"
    batch_size: Annotated[
        int, F("Sequences the teacher scores per forward pass (local) or per request (url).", ge=1)
    ] = 16
    timeout_s: Annotated[
        float, F("url: the wait for each request (each retry gets its own).", gt=0)
    ] = 60.0
    retries: Annotated[
        int, F("url: retries of a request that timed out, could not connect or got 408/409/429/5xx, with "
               "exponential backoff (0.5 s, 1 s, 2 s, ...); a request still failing after them stops the run.",
               ge=0)
    ] = 2
    concurrency: Annotated[int, F("url: requests in flight at once.", ge=1)] = 4

    @property
    def enabled(self) -> bool:
        return bool(self.model or self.url)
