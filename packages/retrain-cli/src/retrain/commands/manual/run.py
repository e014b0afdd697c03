"""`retrain man [TOPIC] [--topic T] [--all] [--list-topics] [--json] [--path]`: one topic, every
topic (--all), or, alone, the table of contents (one line per topic)."""

from __future__ import annotations

import json

from retrain.commands.manual.topic import FOLDER, Topic, load_topic, topic_names
from retrain.config.errors import did_you_mean
from retrain.errors import UserError


def _load(name: str) -> Topic:
    t = load_topic(name)
    if t is None:
        raise UserError(f"unknown topic {name!r}",
                         hint=did_you_mean(name.lower(), topic_names()) or "`retrain man --list-topics` lists them")
    return t


def contents(topics: list[Topic]) -> str:
    width = max(len(t.name) for t in topics)
    lines = ["RETRAIN(1) — TOML-first RLVR trainer", "", "Topics:"]
    lines += [f"  {t.name:<{width}}  {t.summary}" for t in topics]
    lines += ["", "retrain man TOPIC shows one topic; retrain man --all prints them all."]
    return "\n".join(lines)


def run(topic: str | None, list_topics: bool, as_json: bool, path: bool, show_all: bool = False) -> None:
    if path:
        print(FOLDER.resolve())
        return
    if list_topics:
        names = topic_names()
        print(json.dumps({"topics": names}) if as_json else "\n".join(names))
        return
    if topic:
        t = _load(topic)
        if as_json:
            print(json.dumps({"topic": t.name, "title": t.title, "content": t.content}, indent=2))
        else:
            print(f"{t.title.upper()}\n{t.content}\n")
        return
    topics = [_load(name) for name in topic_names()]
    if not show_all:
        print(json.dumps({"topics": [{"topic": t.name, "title": t.title, "summary": t.summary} for t in topics]},
                         indent=2) if as_json else contents(topics))
        return
    if as_json:
        print(json.dumps({"topics": [{"topic": t.name, "title": t.title, "content": t.content} for t in topics]},
                         indent=2))
        return
    print("RETRAIN(1) — TOML-first RLVR trainer\n")
    for t in topics:
        print(f"{t.title.upper()}\n{t.content}\n")
