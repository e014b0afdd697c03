"""`retrain eval --n N` and `[eval] n`: pass@k from more samples per problem than k, live in
the command; n below k is one line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CONFIG = """
[model]
model = "tiny"
[backend]
devices = "cpu"
[training]
seed = 0
batch_size = 2
group_size = 4
max_tokens = 4
temperature = 1.0
[data]
source = "arithmetic"
[eval]
k = 2
{n}
"""


def write_config(tmp_path: Path, n: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(n=n))
    return path


def test_k_above_n_is_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    res = cli("eval", str(write_config(tmp_path)), "--k", "4", "--n", "2")
    assert res.code == 2 and res.stderr.startswith("error: --k 4 --n 2: 2 samples per problem cannot estimate "
                                                   "pass@4"), res.stderr
    assert "Traceback" not in res.stderr


def test_the_base_model_scored_from_n_samples(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("retrain.backends.local", reason="needs retrain-backends-local")
    res = cli("eval", str(write_config(tmp_path, "n = 6")), "--max-examples", "2", "--json")
    assert res.code == 0, res.stderr
    [row] = json.loads(res.stdout)
    assert (row["k"], row["n"], row["examples"]) == (2, 6, 2) and "pass@2" in row
    flag = cli("eval", str(write_config(tmp_path)), "--n", "4", "--max-examples", "2", "--json")
    assert flag.code == 0, flag.stderr
    assert json.loads(flag.stdout)[0]["n"] == 4
