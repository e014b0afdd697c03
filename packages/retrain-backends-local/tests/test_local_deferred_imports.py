"""Loading a model leaves scikit-learn and scipy.optimize unimported (transformers binds one
function of each at start-up; retrain never calls them), and those functions still answer
when called: they import their library then (retrain.models.deferred)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# a fresh process importing transformers and peft: seconds of CPU, so the slow tier
pytestmark = pytest.mark.slow

PROBE = """
import importlib.util, json, sys
from retrain.models.load import ModelSpec, load_model

load_model(ModelSpec("tiny"), seed=0)
report = {"loaded": sorted(m for m in ("sklearn", "scipy.optimize") if m in sys.modules),
          "installed": {m: importlib.util.find_spec(m) is not None for m in ("sklearn", "scipy")}}
from transformers.generation import candidate_generator
from transformers.loss import loss_for_object_detection
report["checks"] = [candidate_generator.is_sklearn_available(), loss_for_object_detection.is_scipy_available()]
if report["installed"]["sklearn"]:
    report["roc"] = candidate_generator.roc_curve([0, 1, 1], [0.1, 0.8, 0.6])[1].tolist()
if report["installed"]["scipy"]:
    rows, cols = loss_for_object_detection.linear_sum_assignment([[4, 1], [2, 8]])
    report["assignment"] = [rows.tolist(), cols.tolist()]
report["after"] = sorted(m for m in ("sklearn", "scipy.optimize") if m in sys.modules)
print(json.dumps(report))
"""


def test_model_loading_defers_sklearn_and_scipy_until_called() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    installed = report["installed"]
    # transformers' own answers are unchanged
    assert report["checks"] == [installed["sklearn"], installed["scipy"]]
    if installed["sklearn"]:
        assert report["roc"] == [0.0, 0.5, 1.0, 1.0]
    if installed["scipy"]:
        assert report["assignment"] == [[0, 1], [1, 0]]
    assert report["after"] == sorted(m for m, on in (("sklearn", installed["sklearn"]),
                                                      ("scipy.optimize", installed["scipy"])) if on)
