"""How plugin callables are read from their signatures (retrain.plugins.signature): the one
place every plugin kind adapts what a dotted path or entry point names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from retrain.plugins.signature import from_factory, has_method, required_positional, takes_config


@dataclass
class Spec:
    name: str = "spec"


class Scorer:
    def score(self, response: str, reference: str) -> float:
        return 1.0


def test_from_factory_calls_a_zero_argument_factory_only() -> None:
    spec = Spec()
    assert from_factory(spec, Spec) is spec  # a spec is used as it is, though its class is a factory
    assert from_factory(Spec, Spec) == Spec()
    assert from_factory(lambda: spec, Spec) is spec
    fn = lambda rewards: rewards  # noqa: E731
    assert from_factory(fn, Spec) is fn  # a function that takes arguments is the plugin itself
    assert from_factory(3, Spec) == 3


def test_has_method_means_an_instance_with_it() -> None:
    assert has_method(Scorer(), "score")
    assert not has_method(Scorer, "score")  # a class is built first
    assert not has_method(Scorer(), "mask")


def test_required_positional_and_takes_config() -> None:
    def reward(response: str, reference: str, *, extra: int = 0) -> float:
        return 0.0

    def factory(config: Any) -> Any:
        return reward

    def optional(cfg: Any = None) -> None:
        return None

    assert required_positional(reward) == 2 and required_positional(factory) == 1
    assert required_positional(optional) == 0 and required_positional(len) == 1
    assert required_positional(3) is None  # no signature to read
    assert takes_config(factory) and takes_config(optional)
    assert not takes_config(reward) and not takes_config(lambda tokens: tokens) and not takes_config(3)
