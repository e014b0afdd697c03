"""On-policy distillation's term of the token advantages (`[teacher]`).

For each sampled token t of a completion, with logp_student(t) the logprob the sampler drew it
with and logp_teacher(t) the teacher's (retrain.teacher):

    A(t) = reward_coef * A_task(t) + kl_coef * -(logp_student(t) - logp_teacher(t))

logp_student - logp_teacher is the one-sample estimate of the reverse KL, KL(student || teacher),
at that token (tinker-cookbook's on-policy distillation), so the term pushes the student toward
what the teacher would have said there; its mean over a step's tokens is `teacher/kl`. A_task
is the pipeline's advantage after REINFORCE++ batch normalisation; the advantage cap, when on,
then bounds the sum. With reward_coef = 0 the run is pure distillation: the reward is still
computed, logged and counted, and trains nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from retrain.advantages.ragged import Floats


@dataclass(frozen=True)
class Distill:
    kl_coef: float
    reward_coef: float


def teacher_advantages(adv_C_T: Sequence[ArrayLike], student_C_T: Sequence[ArrayLike],
                       teacher_C_T: Sequence[ArrayLike], distill: Distill) -> tuple[list[Floats], dict[str, float]]:
    """The token advantages with the teacher's term, completion by completion (C completions,
    T tokens each: every row of the three holds one value per sampled token), and the
    term's own mean (`teacher/adv_mean`) over the trained tokens."""
    out: list[Floats] = []
    terms: list[Floats] = []
    for adv, student, teacher in zip(adv_C_T, student_C_T, teacher_C_T, strict=True):
        a = np.asarray(adv, dtype=np.float64).reshape(-1)
        s = np.asarray(student, dtype=np.float64).reshape(-1)
        t = np.asarray(teacher, dtype=np.float64).reshape(-1)
        if not a.shape == s.shape == t.shape:
            raise ValueError(f"a completion has {a.shape[0]} advantages, {s.shape[0]} sampled logprobs and "
                             f"{t.shape[0]} teacher logprobs; they must be one per sampled token")
        term = distill.kl_coef * (t - s)  # (T,)
        terms.append(term)
        out.append(distill.reward_coef * a + term)
    flat = np.concatenate(terms) if terms else np.zeros(0)
    return out, {"teacher/adv_mean": float(flat.mean()) if flat.size else 0.0}
