"""`build_teacher(config, backend)`: the run's `[teacher]`, or None when it has none.

`[teacher] url` set: a server teacher (retrain.teacher.server), with any backend. Otherwise the
backend loads `[teacher] model` beside its student (`TeacherHost.load_teacher`; validation
refuses a backend that does not declare `teacher_models` before anything loads). Either
checks, before the first step, that the teacher tokenizes as the student does.
"""

from __future__ import annotations

from typing import Any

from retrain.backends.protocol import TeacherHost
from retrain.config.schema import TrainConfig
from retrain.errors import UserError
from retrain.teacher.protocol import Teacher
from retrain.teacher.server import ServerTeacher


def build_teacher(config: TrainConfig, backend: Any) -> Teacher | None:
    t = config.teacher
    if not t.enabled:
        return None
    if t.url:
        return _server(config, backend)
    if not isinstance(backend, TeacherHost):
        raise UserError(f"[teacher] model: a teacher loaded beside the student on backend "
                        f"{config.backend.backend!r} is not built yet in this version",
                        hint="serve the teacher (vLLM, retrain serve) and set [teacher] url")
    teacher: Teacher = backend.load_teacher(config)
    return teacher


def _server(config: TrainConfig, backend: Any) -> ServerTeacher:
    t = config.teacher
    hf = getattr(getattr(backend, "tokenizer", None), "hf", None)
    if hf is None:
        raise UserError(f"[teacher] url: backend {config.backend.backend!r} does not expose its Hugging Face "
                        "tokenizer, so the teacher's cannot be checked against it",
                        hint="use a backend whose tokenizer is a transformers one")
    teacher = ServerTeacher(t.url, t.model, api_key_env=t.api_key_env, timeout_s=t.timeout_s, retries=t.retries,
                            batch_size=t.batch_size, concurrency=t.concurrency)
    try:
        teacher.check_tokenizer(hf, config.model.model)
    except BaseException:
        teacher.close()
        raise
    return teacher
