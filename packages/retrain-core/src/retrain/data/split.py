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

#: the expected share of each built-in source's problems that is held out
HELD_OUT_SHARE = {"arithmetic": 0.2, "math": 0.05, "dataset": 0.05}


def held_out(source: str, key: str, seed: int) -> bool:
    share = HELD_OUT_SHARE[source]
    digest = hashlib.blake2b(f"{max(seed, 0)}\0{source}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < share * 2**64
