"""`arithmetic`: generated addition problems with exact answers, for offline demos and tests.

Difficulty d uses operands with up to d digits. Every problem of the space is enumerated (up
to a cap) and shuffled with the run's seed, so the order is reproducible and a prompt batch
mixes easy and hard sums. The SFT target is `\\boxed{answer}`.
"""

from __future__ import annotations

import random

from retrain.config.schema import TrainConfig
from retrain.types import Example

MAX_PROBLEMS = 20_000


def arithmetic_examples(difficulty: int, seed: int) -> list[Example]:
    top = 10**difficulty
    rng = random.Random(f"arithmetic:{difficulty}:{seed}")
    if top * top <= MAX_PROBLEMS:
        pairs = [(a, b) for a in range(top) for b in range(top)]
        rng.shuffle(pairs)
    else:
        pairs = [(rng.randrange(top), rng.randrange(top)) for _ in range(MAX_PROBLEMS)]
    return [Example(prompt=f"{a}+{b}=", reference=str(a + b), completion=f"\\boxed{{{a + b}}}",
                    task="arithmetic") for a, b in pairs]


def load_arithmetic(config: TrainConfig) -> list[Example]:
    seed = config.training.seed if config.training.seed >= 0 else 0
    return arithmetic_examples(config.data.difficulty, seed)
