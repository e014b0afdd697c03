"""`retrain tree [TREE.toml]` and its subcommands: next, show NODE, run NODE, note NODE TEXT,
eval, reset NODE. The tree file defaults to ./tree.toml; `--json` works with the view and show.

`run` trains the node's config or campaign in this process, records where its results are,
then evaluates its success condition at once (`eval` re-evaluates done nodes that have no
outcome yet, e.g. after a run resumed elsewhere) and reports the nodes it unlocked.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from retrain.commands.errors import CommandFailed
from retrain.errors import UserError
from retrain.tree.eval import evaluate
from retrain.tree.format import next_nodes, render, show
from retrain.tree.model import Tree, load_tree
from retrain.tree.state import Annotation, TreeState, now_iso

DEFAULT_TREE = "tree.toml"
USAGE = ("retrain tree [TREE.toml] [--json] | next [TREE] | show NODE [TREE] [--json] | run NODE [TREE] | "
         "note NODE TEXT [TREE] | eval [TREE] | reset NODE [TREE]")
VERBS = {"next": 0, "show": 1, "run": 1, "note": 2, "eval": 0, "reset": 1}


def run(args: list[str], as_json: bool) -> None:
    verb = args[0] if args and args[0] in VERBS else "view"
    rest = args[1:] if verb != "view" else args
    need = VERBS.get(verb, 0)
    if len(rest) < need or len(rest) > need + 1:
        raise UserError(f"tree {verb}: expected {need} argument{'s' * (need != 1)} and an optional tree file",
                        hint=USAGE)
    operands, tree_file = rest[:need], (rest[need] if len(rest) > need else DEFAULT_TREE)
    if not Path(tree_file).is_file():
        raise UserError(f"no tree file {tree_file}", hint=USAGE)
    tree = load_tree(tree_file)
    state = TreeState(tree)
    if verb == "view":
        print(json.dumps(state.as_json(), indent=2) if as_json else render(state))
    elif verb == "next":
        print(next_nodes(state))
    elif verb == "show":
        state.node(operands[0])  # an unknown id is an error naming the known ones
        node = tree.nodes[operands[0]]
        if as_json:
            print(json.dumps(next(n for n in state.as_json()["nodes"] if n["id"] == node.id), indent=2))
        else:
            print(show(state, node))
    elif verb == "note":
        state.node(operands[0]).annotations.append(Annotation(operands[1], now_iso()))
        state.save()
        print(f"noted on {operands[0]}")
    elif verb == "reset":
        st = state.node(operands[0])
        st.status, st.outcome, st.result, st.campaign_dir = "pending", None, {}, None
        st.started_at = st.completed_at = st.error = None
        state.save()
        print(f"{operands[0]} reset to pending (notes kept)")
    elif verb == "eval":
        _eval_all(state)
    else:
        _run_node(tree, state, operands[0])


def _eval_all(state: TreeState) -> None:
    changed = False
    for node in state.tree.nodes.values():
        st = state.nodes.get(node.id)
        if st is None or st.status != "done" or st.outcome or node.success is None:
            continue
        outcome = evaluate(node, st)
        changed = True
        print(f"{node.id}: {outcome} ({', '.join(f'{k}={v:g}' for k, v in st.result.items()) or st.error})")
    if changed:
        state.save()
    else:
        print("Nothing to evaluate (no done node without an outcome).")


def _run_node(tree: Tree, state: TreeState, node_id: str) -> None:
    st = state.node(node_id)
    node = tree.nodes[node_id]
    status = state.effective(node_id)
    if status in ("locked", "skipped"):
        parents = ", ".join(f"{p.id} ({b})" for p, b in tree.parents(node_id))
        raise UserError(f"node {node_id} is {status}: it runs after {parents}",
                        hint=f"`retrain tree reset {node_id}` does not unlock it; run its parents first")
    if status == "done":
        raise UserError(f"node {node_id} already ran ({st.outcome or 'no outcome'})",
                        hint=f"`retrain tree reset {node_id} {tree.path}` first to run it again")
    config = tree.config_path(node)
    if not config.is_file():
        raise UserError(f"node {node_id}: no config {config}")
    st.status, st.started_at, st.completed_at, st.error = "running", now_iso(), None, None
    state.save()
    try:
        output, failure = _train(config)
    except BaseException:
        st.status, st.started_at = "pending", None
        state.save()
        raise
    st.campaign_dir, st.error = output, failure or None
    st.status, st.completed_at = "done", now_iso()
    outcome = evaluate(node, st)
    state.save()
    if outcome:
        measured = ", ".join(f"{k}={v:g}" for k, v in st.result.items()) or st.error
        print(f"{node_id}: {outcome} ({measured})")
        branch = node.on_success if outcome == "success" else node.on_failure
        unlocked = [n for n in branch if state.effective(n) == "pending"]
        if unlocked:
            print("unlocked: " + ", ".join(unlocked))
    if failure:
        raise CommandFailed(failure)


def _train(config: Path) -> tuple[str, str]:
    """Run a node's file as `retrain FILE` would: (where its results are, failure or "")."""
    from retrain.config import read_toml
    from retrain.validation.load import load_config

    loaded = load_config(config)
    if read_toml(config).kind == "campaign":
        from retrain.campaign.expand import expand
        from retrain.campaign.parse import parse_campaign
        from retrain.commands.run.campaign import run as run_campaign

        assert loaded.source is not None
        folder = expand(parse_campaign(loaded.source, loaded), loaded.source).dir
        try:
            run_campaign(str(config))
        except CommandFailed as exc:  # some runs failed: the finished ones are still measured
            return str(folder), str(exc)
        return str(folder), ""
    from retrain.commands.run.run import train

    print(f"tree: training {config}", file=sys.stderr)
    try:
        train(loaded.config, loaded.path)
    except CommandFailed:
        return str(Path(loaded.config.logging.log_dir).resolve()), f"training {config} failed"
    return str(Path(loaded.config.logging.log_dir).resolve()), ""
