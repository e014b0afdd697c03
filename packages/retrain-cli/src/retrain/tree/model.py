"""Experiment-tree files: `[tree]` with `[[tree.nodes]]`, each node a config or campaign to
run, an optional success condition on its metrics, and the nodes it unlocks on success or
on failure.

    [tree]
    name = "delight"
    [[tree.nodes]]
    id = "baseline"
    campaign = "baseline.toml"        # any retrain config: a campaign or a single run
    success = "mean_reward >= 0.5"    # METRIC OP NUMBER; METRIC a metrics.jsonl field or eval/...
    on_success = ["bigger"]
    on_failure = ["debug"]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrain.config.errors import ConfigError, ConfigIssue
from retrain.config.source import TomlSource, read_toml

OPS = (">=", "<=", "==", ">", "<")
_SUCCESS = re.compile(r"^\s*(?P<metric>[A-Za-z_][\w/@.]*)\s*(?P<op>>=|<=|==|>|<)\s*(?P<value>[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)\s*$")
_NODE_KEYS = {"id", "label", "campaign", "notes", "refs", "success", "on_success", "on_failure", "related"}


@dataclass(frozen=True)
class Success:
    metric: str
    op: str
    value: float

    def met(self, measured: float) -> bool:
        return {">=": measured >= self.value, "<=": measured <= self.value, "==": measured == self.value,
                ">": measured > self.value, "<": measured < self.value}[self.op]

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


@dataclass
class Node:
    id: str
    label: str
    campaign: str
    notes: str = ""
    refs: list[str] = field(default_factory=list)
    success: Success | None = None
    on_success: list[str] = field(default_factory=list)
    on_failure: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)


@dataclass
class Tree:
    path: Path
    name: str
    description: str
    nodes: dict[str, Node]

    def config_path(self, node: Node) -> Path:
        """A node's config, relative to the tree file."""
        return (self.path.parent / node.campaign).resolve()

    def parents(self, node_id: str) -> list[tuple[Node, str]]:
        """(parent, branch) for every node listing `node_id` under on_success / on_failure."""
        out = []
        for node in self.nodes.values():
            if node_id in node.on_success:
                out.append((node, "success"))
            if node_id in node.on_failure:
                out.append((node, "failure"))
        return out

    def roots(self) -> list[Node]:
        return [n for n in self.nodes.values() if not self.parents(n.id)]


def parse_success(text: str) -> Success | None:
    m = _SUCCESS.match(text)
    return Success(m["metric"], m["op"], float(m["value"])) if m else None


def load_tree(path: str | Path) -> Tree:
    source = read_toml(path)
    table = source.data.get("tree")
    if not isinstance(table, dict):
        raise ConfigError([ConfigIssue("a tree file needs a [tree] table with [[tree.nodes]]", key="[tree]",
                                       path=source.path)])
    issues: list[ConfigIssue] = []
    nodes: dict[str, Node] = {}
    raw_nodes = table.get("nodes", [])
    for index, raw in enumerate(raw_nodes if isinstance(raw_nodes, list) else []):
        node = _node(index, raw, source, issues)
        if node is not None:
            if node.id in nodes:
                issues.append(_issue(source, index, "id", f"two nodes have the id {node.id!r}"))
            nodes[node.id] = node
    if not nodes and not issues:
        issues.append(ConfigIssue("no [[tree.nodes]]", key="[tree]", path=source.path))
    for index, node in enumerate(nodes.values()):
        for key in ("on_success", "on_failure", "related"):
            for target in getattr(node, key):
                if target not in nodes:
                    issues.append(_issue(source, index, key, f"unknown node {target!r}",
                                         hint="nodes: " + ", ".join(nodes)))
    if issues:
        raise ConfigError(issues)
    return Tree(Path(source.path), str(table.get("name") or Path(source.path).stem),
                str(table.get("description") or ""), nodes)


def _issue(source: TomlSource, index: int, key: str, message: str, hint: str = "") -> ConfigIssue:
    return ConfigIssue(message, key=f"[[tree.nodes]] #{index + 1} {key}", hint=hint, path=source.path)


def _strings(raw: dict[str, Any], key: str, source: TomlSource, index: int, issues: list[ConfigIssue]) -> list[str]:
    value = raw.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        issues.append(_issue(source, index, key, "must be a list of strings"))
        return []
    return list(value)


def _node(index: int, raw: Any, source: TomlSource, issues: list[ConfigIssue]) -> Node | None:
    if not isinstance(raw, dict):
        issues.append(ConfigIssue("must be a table", key=f"[[tree.nodes]] #{index + 1}", path=source.path))
        return None
    for key in sorted(set(raw) - _NODE_KEYS):
        issues.append(_issue(source, index, key, "unknown key", hint="keys: " + ", ".join(sorted(_NODE_KEYS))))
    node_id, campaign = raw.get("id"), raw.get("campaign")
    if not isinstance(node_id, str) or not node_id:
        issues.append(_issue(source, index, "id", "required, a non-empty string"))
        return None
    if not isinstance(campaign, str) or not campaign:
        issues.append(_issue(source, index, "campaign", "required: the config or campaign file the node runs"))
        return None
    success = None
    if raw.get("success") is not None:
        success = parse_success(str(raw["success"]))
        if success is None:
            issues.append(_issue(source, index, "success", f"{raw['success']!r} is not METRIC OP NUMBER",
                                 hint='e.g. success = "mean_reward >= 0.5" (OP: ' + " ".join(OPS) + ")"))
    return Node(node_id, str(raw.get("label") or node_id), campaign, str(raw.get("notes") or ""),
                _strings(raw, "refs", source, index, issues), success,
                _strings(raw, "on_success", source, index, issues), _strings(raw, "on_failure", source, index, issues),
                _strings(raw, "related", source, index, issues))
