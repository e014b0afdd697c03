"""What a user sees from `retrain CONFIG`: retrain's own lines and nothing from the libraries
underneath (torch's log records on import, transformers' bars at each save), through a pipe
(plain step lines on stdout, nothing on stderr) and on a terminal (a live bar)."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

THIRD_PARTY = [
    re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d"),  # torch's (glog-style) log records
    re.compile(r"\w+Warning: "),  # Python warnings
    re.compile(r"(it/s|s/it)\]"),  # tqdm bars
    re.compile(r"Writing model shards"),
    re.compile(r"kernels-community"),  # bitsandbytes' note about an optional CPU kernel
]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: the closing summary's first line: after 2 warmup steps every group may still tie, and the
#: summary then says the run trained nothing (retrain.training.idle); either is retrain's own
CLOSING = re.compile(r"(Training complete|Run complete, nothing trained): maxrl\+none, 4 RL steps")


def demo_args(root: Path, *extra: str) -> list[str]:
    """The demo's config as a user runs it, cut to a few steps with a checkpoint every 2."""
    shutil.copy(REPO / "retrain.toml", root / "retrain.toml")
    return [sys.executable, "-m", "retrain.cli", "--max-steps", "4", "--batch-size", "4", "--group-size", "4",
            "--sft-warmup-steps", "2", "--sft-batch-size", "4", "--save-every", "2", "--log-dir", "logs",
            "--adapter-path", "adapters", *extra]


def third_party_lines(text: str) -> list[str]:
    lines = re.split(r"[\r\n]+", ANSI.sub("", text))
    return [line for line in lines if any(p.search(line) for p in THIRD_PARTY)]


def test_piped_run_prints_retrains_lines_only(tmp_path: Path) -> None:
    """The demo's path: full-model weights, written by transformers at every checkpoint."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(demo_args(tmp_path), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "adapters" / "checkpoint_step_2").is_dir()
    assert proc.stderr == ""
    assert third_party_lines(proc.stdout) == []
    lines = proc.stdout.splitlines()
    assert lines[0] == "retrain: retrain.toml: loading tiny on cpu ..."  # at once, before the imports
    assert lines[1].startswith("retrain: condition=maxrl+none")
    assert [line.split(" [")[0] for line in lines if line.startswith("step ")] == ["step 0", "step 3"]
    assert CLOSING.search(proc.stdout), proc.stdout[-2000:]
    assert "\x1b[" not in proc.stdout and "━" not in proc.stdout


def test_terminal_run_draws_a_progress_bar(tmp_path: Path) -> None:
    """LoRA (peft imported too) on a pseudo-terminal: stdout and stderr both land on it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TERM": "xterm-256color", "COLUMNS": "120"}
    main, child = pty.openpty()
    proc = subprocess.Popen(demo_args(tmp_path, "--backend-opt", "train_full_model=false"), cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=child, stderr=child)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=600) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert third_party_lines(screen) == []
    plain = ANSI.sub("", screen)
    assert "━" in plain and re.search(r"RL .*4/4 reward \d\.\d{3}", plain), plain[-2000:]
    assert "warmup" in plain and "2/2" in plain and "eta" in plain
    assert "step 3 [maxrl+none]" in plain
    assert CLOSING.search(plain), plain[-2000:]
