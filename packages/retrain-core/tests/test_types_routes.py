"""`retrain.types.Routes`, the compact record of a mixture-of-experts sampler's expert choices:
the narrowest dtype that holds the ids, slicing by position, and a datum carrying one through
msgspec's JSON (the optimizer-batch artifact) unchanged."""

from __future__ import annotations

import msgspec
import numpy as np

from retrain.training.optimizer_batch.artifact import LogicalBatch
from retrain.types import Datum, Routes


def test_routes_keep_their_ids_in_the_narrowest_dtype_and_cut_by_position() -> None:
    ids = np.arange(5 * 3 * 2).reshape(5, 3, 2) % 7
    routes = Routes.of(ids)
    assert routes.dtype == "uint8" and routes.shape == (5, 3, 2) and len(routes.ids) == ids.size
    assert np.array_equal(routes.array(), ids) and np.array_equal(routes.cut(2).array(), ids[2:])
    assert Routes.of(np.full((2, 1, 1), 300)).dtype == "int16"  # more than 256 experts


def test_a_datum_with_routes_survives_the_optimizer_batch_json() -> None:
    datum = Datum(tokens=[1, 2, 3, 4], logprobs=[0.0] * 4, advantages=[0.0, 0.0, 1.0, 1.0],
                  routes=Routes.of(np.arange(24).reshape(4, 3, 2) % 5))
    raw = msgspec.json.encode(LogicalBatch(datums=[datum], lr=1e-3, weight_decay=0.0))
    assert msgspec.json.decode(raw, type=LogicalBatch).datums == [datum]
