"""`retrain man [TOPIC] [--topic T] [--list-topics] [--json] [--path]`."""

from __future__ import annotations

import json

from retrain.commands.manual.topic import FOLDER, load_topic, topic_names
from retrain.config.errors import did_you_mean
from retrain.errors import UserError


def run(topic: str | None, list_topics: bool, as_json: bool, path: bool) -> None:
    if path:
        print(FOLDER.resolve())
        return
    if list_topics:
        names = topic_names()
        print(json.dumps({"topics": names}) if as_json else "\n".join(names))
        return
    names = [topic] if topic else topic_names()
    topics = []
    for name in names:
        t = load_topic(name)
        if t is None:
            raise UserError(f"unknown topic {name!r}",
                             hint=did_you_mean(name.lower(), topic_names()) or "`retrain man --list-topics` lists them")
        topics.append(t)
    if as_json:
        payload = [{"topic": t.name, "title": t.title, "content": t.content} for t in topics]
        print(json.dumps(payload[0] if topic else {"topics": payload}, indent=2))
        return
    if not topic:
        print("RETRAIN(1) — TOML-first RLVR trainer\n")
        print("Topics: " + ", ".join(topic_names()) + "  (retrain man TOPIC)\n")
    for t in topics:
        print(t.title.upper())
        print(t.content)
        print()
