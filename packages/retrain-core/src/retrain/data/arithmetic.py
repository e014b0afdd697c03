"""`arithmetic`: generated addition problems with exact answers, for offline demos and tests.

Difficulty d uses operands with up to d digits. A fifth of the problem space is held out for
evaluation (`retrain.data.split`); training walks the rest. Small spaces are enumerated
and shuffled with the run's seed, so the order is reproducible and a prompt batch mixes easy
and hard sums; spaces over MAX_PROBLEMS pairs are sampled with the seed (each side drawing
only its own pairs). The SFT target is `\\boxed{answer}`.
"""

from __future__ import annotations

import random

from retrain.config.schema import TrainConfig
from retrain.data.source import data_seed
from retrain.data.split import held_out
from retrain.types import Example

MAX_PROBLEMS = 20_000
#: problems drawn for the held-out side of a sampled (large) space
MAX_HELD_OUT = 2_000


def prompt(a: int, b: int) -> str:
    return f"{a}+{b}="


def arithmetic_examples(difficulty: int, seed: int, *, held: bool = False) -> list[Example]:
    """The training problems, or with `held` the held-out ones, of a difficulty."""
    top = 10**difficulty
    rng = random.Random(f"arithmetic:{difficulty}:{seed}" + (":held_out" if held else ""))

    def mine(a: int, b: int) -> bool:
        return held_out("arithmetic", prompt(a, b), seed) == held

    if top * top <= MAX_PROBLEMS:
        pairs = [(a, b) for a in range(top) for b in range(top) if mine(a, b)]
        rng.shuffle(pairs)
    else:
        pairs = []
        want = MAX_HELD_OUT if held else MAX_PROBLEMS
        while len(pairs) < want:
            a, b = rng.randrange(top), rng.randrange(top)
            if mine(a, b):
                pairs.append((a, b))
    return [Example(prompt=prompt(a, b), reference=str(a + b), completion=f"\\boxed{{{a + b}}}",
                    task="arithmetic") for a, b in pairs]


def load_arithmetic(config: TrainConfig) -> list[Example]:
    return arithmetic_examples(config.data.difficulty, data_seed(config))


def load_arithmetic_held_out(config: TrainConfig) -> list[Example]:
    return arithmetic_examples(config.data.difficulty, data_seed(config), held=True)
