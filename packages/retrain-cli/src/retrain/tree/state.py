"""`tree_state.json` beside the tree file: each node's progress, written atomically.

Stored status: pending, running, done or skipped. The status a user sees is derived: an
explicit running/done/skipped wins; a root is pending; a child becomes pending as soon as a
parent is done on the branch that lists it (on_success after success, on_failure after
failure), skipped once every parent is decided and none chose it, and is locked until then.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from retrain.errors import UserError
from retrain.io import layout
from retrain.io.atomic import write_bytes_atomic
from retrain.tree.model import Tree

ICONS = {"pending": "[ ]", "locked": "[#]", "running": "[~]", "success": "[✓]", "failure": "[✗]",
         "skipped": "[-]", "done": "[?]"}


class Annotation(msgspec.Struct):
    text: str
    at: str


class NodeState(msgspec.Struct, kw_only=True, omit_defaults=True):
    status: str = "pending"
    outcome: str | None = None
    campaign_dir: str | None = None
    result: dict[str, float] = msgspec.field(default_factory=dict)
    started_at: str | None = None
    completed_at: str | None = None
    error: str | None = None
    annotations: list[Annotation] = msgspec.field(default_factory=list)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class TreeState:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.path = tree.path.parent / layout.TREE_STATE
        self.nodes: dict[str, NodeState] = {}
        if self.path.exists():
            try:
                self.nodes = msgspec.json.decode(self.path.read_bytes(), type=dict[str, NodeState])
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise UserError(f"{self.path}: not a tree state retrain can read ({exc})",
                                hint="move it away to start the tree over") from None

    def node(self, node_id: str) -> NodeState:
        if node_id not in self.tree.nodes:
            raise UserError(f"no node {node_id!r} in {self.tree.path}", hint="nodes: " + ", ".join(self.tree.nodes))
        return self.nodes.setdefault(node_id, NodeState())

    def save(self) -> None:
        known = {k: v for k, v in self.nodes.items() if k in self.tree.nodes}
        write_bytes_atomic(self.path, msgspec.json.format(msgspec.json.encode(known), indent=2) + b"\n")

    def effective(self, node_id: str, _seen: frozenset[str] = frozenset()) -> str:
        own = self.nodes.get(node_id, NodeState())
        if own.status in ("running", "done", "skipped"):
            return own.status
        parents = self.tree.parents(node_id)
        if not parents:
            return "pending"
        decided = True
        for parent, branch in parents:
            ps = self.nodes.get(parent.id, NodeState())
            if ps.status == "done" and ps.outcome == branch:
                return "pending"
            if ps.status == "done" and ps.outcome:
                continue
            # a parent skipped in turn is decided too (a cycle in the tree counts as undecided)
            if parent.id in _seen or self.effective(parent.id, _seen | {node_id}) != "skipped":
                decided = False
        return "skipped" if decided else "locked"

    def icon(self, node_id: str) -> str:
        status = self.effective(node_id)
        outcome = self.nodes.get(node_id, NodeState()).outcome
        return ICONS[outcome] if status == "done" and outcome else ICONS.get(status, "[?]")

    def as_json(self) -> dict[str, Any]:
        nodes = []
        for node in self.tree.nodes.values():
            st = self.nodes.get(node.id, NodeState())
            nodes.append({
                "id": node.id, "label": node.label, "campaign": node.campaign, "status": self.effective(node.id),
                "outcome": st.outcome, "success": str(node.success) if node.success else None,
                "on_success": node.on_success, "on_failure": node.on_failure, "related": node.related,
                "result": st.result, "campaign_dir": st.campaign_dir, "started_at": st.started_at,
                "completed_at": st.completed_at, "error": st.error,
                "annotations": [msgspec.to_builtins(a) for a in st.annotations], "notes": node.notes,
                "refs": node.refs})
        return {"name": self.tree.name, "description": self.tree.description, "nodes": nodes}
