"""Verdicts already given, so that a question is put to the judge once per run: a resumed run
(or a completion sampled twice) gets the verdict the first asking got, which also keeps a
resumed run's rewards equal to an uninterrupted run's when the judge itself is not
deterministic.

One JSON line per verdict, `{"key", "score"}`, appended to `judge_cache.jsonl` in the log
directory after each batch (flushed and fsynced); the key is the sha256 of the client, the
judge model, the template version and the (prompt, reference, response) asked about. A torn
last line (a crash mid-write) is cut when the file is opened; failures are never cached.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from retrain.io.log import read_jsonl
from retrain.rewards.judge.verdict import TEMPLATE_VERSION


def verdict_key(client: str, model: str, prompt: str, reference: str, response: str) -> str:
    text = json.dumps([client, model, TEMPLATE_VERSION, prompt, reference, response], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class JudgeCache:
    def __init__(self, path: Path | None) -> None:
        """`path` None: an in-memory cache (a process that writes no run files, `retrain trace`)."""
        self.path = path
        self.scores: dict[str, float] = {}
        if path is None or not path.exists():
            return
        _cut_torn_tail(path)
        for row in read_jsonl(path):
            key, score = row.get("key"), row.get("score")
            if isinstance(key, str) and isinstance(score, (int, float)):
                self.scores[key] = float(score)

    def get(self, key: str) -> float | None:
        return self.scores.get(key)

    def add(self, verdicts: Iterable[tuple[str, float]]) -> None:
        new = [(k, s) for k, s in verdicts if k not in self.scores]
        self.scores.update(new)
        if not new or self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            out.write("".join(json.dumps({"key": k, "score": s}) + "\n" for k, s in new))
            out.flush()
            os.fsync(out.fileno())


def _cut_torn_tail(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as f:
            f.truncate(data.rfind(b"\n") + 1)
