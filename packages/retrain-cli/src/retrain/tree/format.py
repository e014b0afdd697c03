"""The tree as text: an ASCII tree from the roots, children under `success ->` and
`failure ->`, a node met again shown as `(see above)`; and one node's detail view."""

from __future__ import annotations

from retrain.tree.model import Node
from retrain.tree.state import TreeState


def _line(state: TreeState, node: Node) -> str:
    st = state.nodes.get(node.id)
    result = ""
    if st and st.result:
        result = "  (" + ", ".join(f"{k}={v:g}" for k, v in st.result.items() if k != "runs") + ")"
    return f"{state.icon(node.id)} {node.id}  \"{node.label}\"{result}"


def render(state: TreeState) -> str:
    tree = state.tree
    lines = [f"{tree.name}" + (f" — {tree.description}" if tree.description else "")]
    seen: set[str] = set()

    def walk(node: Node, indent: str) -> None:
        if node.id in seen:
            lines.append(f"{indent}{state.icon(node.id)} {node.id}  (see above)")
            return
        seen.add(node.id)
        lines.append(indent + _line(state, node))
        for branch, children in (("success", node.on_success), ("failure", node.on_failure)):
            if children:
                lines.append(f"{indent}    {branch} ->")
                for child in children:
                    walk(tree.nodes[child], indent + "      ")

    for root in tree.roots() or list(tree.nodes.values())[:1]:
        walk(root, "")
    lines.append("[ ] pending  [#] locked  [~] running  [✓] success  [✗] failure  [-] skipped")
    return "\n".join(lines)


def next_nodes(state: TreeState) -> str:
    ready = [n for n in state.tree.nodes.values() if state.effective(n.id) == "pending"]
    if not ready:
        return "No pending nodes."
    lines = ["Ready to run:"]
    for n in ready:
        lines.append(f"  {n.id}: {n.campaign}")
        lines.append(f"    \"{n.label}\"" + (f" — {n.notes}" if n.notes else ""))
    return "\n".join(lines)


def show(state: TreeState, node: Node) -> str:
    st = state.node(node.id)
    lines = [f"{state.icon(node.id)} {node.id}: {node.label}", f"  status: {state.effective(node.id)}"
             + (f" ({st.outcome})" if st.outcome else ""), f"  campaign: {node.campaign}"]
    if node.success:
        lines.append(f"  success: {node.success}")
    if node.notes:
        lines.append(f"  notes: {node.notes}")
    for key, values in (("refs", node.refs), ("on_success", node.on_success), ("on_failure", node.on_failure),
                        ("related", node.related)):
        if values:
            lines.append(f"  {key}: {', '.join(values)}")
    for key in ("campaign_dir", "started_at", "completed_at", "error"):
        if getattr(st, key):
            lines.append(f"  {key}: {getattr(st, key)}")
    if st.result:
        lines.append("  result: " + ", ".join(f"{k}={v:g}" for k, v in st.result.items()))
    for a in st.annotations:
        lines.append(f"  [{a.at}] {a.text}")
    return "\n".join(lines)
