"""Seeds of sampling requests sent to a server (an inference engine or a remote service)."""

from __future__ import annotations

import hashlib


def request_seeds(run_seed: int, batch: int | None, n: int) -> list[int] | None:
    """One seed per request, a function of the run's seed and the batch's name only (never of
    a stream another thread draws from), so re-sampling a batch gives the same requests."""
    if batch is None:
        return None
    return [int.from_bytes(hashlib.blake2b(f"{run_seed}:{batch}:{i}".encode(), digest_size=4).digest(), "little")
            & 0x7FFFFFFF for i in range(n)]
