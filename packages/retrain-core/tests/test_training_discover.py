"""The TTT-Discover archive, its memory prompt and its config rules (spec algorithms.md §13)."""

import pytest

from retrain.config.errors import ConfigError
from retrain.training.discovery.archive import Archive
from retrain.training.discovery.prompt import INSTRUCTION, DiscoverParams, memory_prompt, truncate
from retrain.validation.load import load_config


def expanded_root() -> Archive:
    """The worked example: one expansion of the root, children rewards .4 (id 1) and .9 (id 2)."""
    a = Archive(root_reward=0.0)
    a.record_selection(0)
    assert a.add(0, "first", 0.4, step=0) == 1
    assert a.add(0, "second", 0.9, step=0) == 2
    return a


def test_fresh_archive_cycles_the_root():
    assert Archive(0.0).select(2, c=1.0) == [0, 0]


def test_worked_example_priors_q_and_scores():
    a = expanded_root()
    assert a.priors() == pytest.approx({2: 0.5, 1: 1 / 3, 0: 1 / 6})
    assert {i: e.q for i, e in a.entries.items()} == {0: 0.9, 1: 0.4, 2: 0.9}
    assert a.scores(1.0) == pytest.approx({2: 1.607107, 0: 1.017851, 1: 0.871405}, abs=1e-6)
    assert a.select(3, c=1.0) == [2, 0, 1]


def test_worked_example_prune_removes_the_worse_leaf():
    a = expanded_root()
    assert a.prune(2) == [1]
    assert sorted(a.entries) == [0, 2] and a.entries[0].children == [2]
    assert a.entries[0].best_child == 0.9


def test_best_child_propagates_and_prune_recomputes_it():
    a = Archive(0.1)
    child = a.add(0, "a", 0.2, step=0)
    grandchild = a.add(child, "b", 0.8, step=1)
    a.add(0, "c", 0.5, step=1)
    assert a.entries[0].q == 0.8 and a.entries[child].q == 0.8
    a.record_selection(grandchild)
    assert [a.entries[i].expansions for i in (0, child, grandchild)] == [1, 1, 1] and a.n_total == 1
    # the leaves are "b" (0.8) and "c" (0.5): "c" goes, then "b"; an inner entry is never removed before its leaves
    assert a.prune(2) == [3, grandchild]
    assert a.entries[0].best_child == 0.2 and a.entries[child].best_child == float("-inf")
    assert a.prune(0) == [child] and list(a.entries) == [0]


def test_memory_prompt_sections():
    a = expanded_root()
    a.add(2, "x" * 2000, 0.7, step=1)
    params = DiscoverParams.of({"context_k": 2, "candidate_char_limit": 100, "context_char_limit": 10})
    text = memory_prompt("Solve it.", a, 2, params)
    assert text == ("Solve it.\n\nDiscovery memory:\n\n"
                    "Current candidate to improve:\nsecond\n\n"
                    "Other promising attempts:\n"
                    "1. reward=0.7000\n" + "x" * 61 + "...\n"
                    "2. reward=0.4000\nfirst\n\n" + INSTRUCTION)


def test_memory_prompt_of_the_fresh_root_has_no_other_attempts():
    text = memory_prompt("P", Archive(0.0), 0, DiscoverParams())
    assert text == f"P\n\nDiscovery memory:\n\nCurrent candidate to improve:\n\n\n{INSTRUCTION}"


def test_params_floors():
    p = DiscoverParams.of({"archive_max_entries": 10, "candidate_char_limit": 5})
    assert p.max_entries(2, 4) == 64 and p.max_entries(40, 4) == 320
    assert DiscoverParams.of({"archive_max_entries": 5000}).max_entries(2, 4) == 5000
    assert p.candidate_char_limit == 64 and truncate("abcdef", 5) == "ab..."


def load(*flags: str):
    return load_config(None, ["--trainer", "ttt_discover", *flags], import_plugins=False)


def test_config_accepts_ttt_discover():
    assert load("--algorithm-mode", "discover_entropic").config.training.trainer == "ttt_discover"


@pytest.mark.parametrize(("flags", "key"), [
    (("--resume-from", "logs/x"), "cannot resume"),
    (("--algorithm-param", "puct_c=-1"), "--algorithm-param puct_c (command line)"),
    (("--algorithm-param", "context_k=1.5"), "--algorithm-param context_k (command line)"),
])
def test_config_refuses_what_discover_cannot_do(flags, key):
    with pytest.raises(ConfigError) as info:
        load(*flags)
    assert key in str(info.value)
