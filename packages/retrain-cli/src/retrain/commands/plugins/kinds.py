"""The plugin kinds `retrain init-plugin` scaffolds: template, entry attribute and the TOML
that selects the plugin."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScaffoldKind:
    name: str
    attr: str  # the plugin's entry object; {name} / {Name} are filled in
    snippet: str  # TOML that selects it
    summary: str


KINDS: dict[str, ScaffoldKind] = {
    k.name: k
    for k in (
        ScaffoldKind(
            "transform",
            "{name}",
            '[algorithm]\ntransform_mode = "{name}.{attr}"\n\n[algorithm.transform_params]\n'
            "{name}_strength = 0.5\n",
            "token-credit transform f(TransformContext) -> TransformOutput",
        ),
        ScaffoldKind(
            "advantage",
            "{name}",
            '[algorithm]\nadvantage_mode = "{name}.{attr}"\n',
            "episode advantage f(rewards, params) -> one float per completion",
        ),
        ScaffoldKind(
            "algorithm",
            "{name}",
            '[algorithm]\nalgorithm_mode = "{name}.{attr}"\n',
            "full algorithm f(AlgorithmContext) -> token advantages",
        ),
        ScaffoldKind(
            "reward",
            "score",
            '[reward]\ntype = "custom"\ncustom_module = "{name}"\ncustom_function = "{attr}"\n',
            "reward score(response, reference) -> float (may be async)",
        ),
        ScaffoldKind(
            "planning",
            "{name}",
            '[planning]\ndetector = "{name}.{attr}"\n',
            "planning detector f(tokens) -> one 0/1 flag per token",
        ),
        ScaffoldKind(
            "data",
            "{name}",
            '[data]\nsource = "{name}.{attr}"\n',
            "data source f(config) -> examples with prompt and reference",
        ),
        ScaffoldKind(
            "backend",
            "{Name}Backend",
            '[backend]\nbackend = "{name}.{attr}"\n',
            "training backend class with capability hooks",
        ),
        ScaffoldKind(
            "inference",
            "{Name}Engine",
            "# Inference engines other than the in-process pytorch one are not built yet in this\n"
            "# version: [inference] engine and url refuse anything else, so nothing selects this yet.\n",
            "sampling engine class",
        ),
        ScaffoldKind(
            "backpressure",
            "{Name}Backpressure",
            "# Back-pressure controllers are selected by the trainer ([backpressure] enabled);\n"
            "# pass this class where a Backpressure is expected.\n",
            "batch-size controller (observe / recommend / state_dict)",
        ),
        ScaffoldKind(
            "trainer",
            "{name}",
            '[training]\ntrainer = "{name}.{attr}"\n',
            "trainer factory f(config) -> object with run(config); replaces the RL loop",
        ),
    )
}
