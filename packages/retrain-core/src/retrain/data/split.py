"""The held-out split of the built-in data sources: problems training never samples from.

A problem is held out when a 64-bit BLAKE2b hash of (seed, source, its key) falls below the
source's share of 2**64. The key is the prompt text (`arithmetic`: `"a+b="`; `math`: the
problem statement; `dataset`: the example's prompt, the last user turn of a chat row), so the
rule is a predicate on one problem: it does not depend on which other problems a source
loads, their order, `[training] max_examples`, or whether `[eval]` is on. Training and evaluation are therefore disjoint over the whole problem space, and a run
trains on the same problems with and without evaluation. `[training] seed` = -1 splits as 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

#: the expected share of each built-in source's problems that is held out
HELD_OUT_SHARE = {"arithmetic": 0.2, "math": 0.05, "dataset": 0.05}


def held_out_rule(source: str, seed: int) -> Callable[[str], bool]:
    """`held_out` of one source and seed, for many keys (a table's million rows)."""
    prefix = f"{max(seed, 0)}\0{source}\0".encode()
    bound = HELD_OUT_SHARE[source] * 2**64
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes

    def rule(key: str) -> bool:
        return from_bytes(blake2b(prefix + key.encode(), digest_size=8).digest(), "big") < bound

    return rule


def held_out(source: str, key: str, seed: int) -> bool:
    return held_out_rule(source, seed)(key)
