"""The import graph of the seven distributions' sources, file by file (docs/development.md).

What counts as an import: every `import` and `from ... import` statement in a file, at its
top, inside a function, or under `if TYPE_CHECKING:` alike. A deferred import hides a circle,
it does not break one (the two circles this test first found were both deferred), and a
type-only one still ties the two files together. `from retrain.a import b` names the module
`retrain.a.b` when there is one, else `retrain.a` (its `__init__.py`); relative imports are
resolved the same way. The parent packages Python runs before a module are not counted, so
an `__init__.py` that re-exports its own modules is no circle.

Checked:
- no circle between files, anywhere in the seven distributions;
- the local backend's floors: `retrain.models` (1) < `retrain.inference_engine` (2) <
  `retrain.backends.local` (3); a file names nothing on a higher floor, neither by an import
  nor by a dotted-path string (`retrain.backends.local.backend:LocalBackend`);
- what the six other distributions import from retrain-core is on `CORE_SURFACE`, module by
  module, with the distributions that may import it and why: a new reach into core fails
  here until it is listed with its reason, and an entry nothing imports any more is stale.

Only `ast`: nothing is imported, torch least of all.
"""

from __future__ import annotations

import ast
import graphlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[1] / "packages"

#: a string naming a module the way a dotted-path plugin does (as in test_workspace_layout)
DOTTED = re.compile(r"^retrain(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


@dataclass(frozen=True)
class Source:
    member: str
    path: Path
    #: the package a relative import starts from (the folder the file is in)
    package: tuple[str, ...]


def sources(srcs: dict[str, Path]) -> dict[str, Source]:
    """{module name: its file} for every `src` folder, keyed by the member that holds it."""
    out: dict[str, Source] = {}
    for member, src in srcs.items():
        for path in sorted(src.rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = Source(member, path, parts[:-1])
    return out


def workspace() -> dict[str, Source]:
    return sources({p.name: p / "src" for p in sorted(PACKAGES.iterdir()) if (p / "src").is_dir()})


def imported(source: Source) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import in the file, wherever it stands."""
    for node in ast.walk(ast.parse(source.path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            package = source.package[:len(source.package) - node.level + 1] if node.level else ()
            base = ".".join([*package, *([node.module] if node.module else [])])
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


def dotted_strings(source: Source) -> Iterator[tuple[int, str]]:
    """(line, module) of every string that names a retrain module by a dotted path."""
    for node in ast.walk(ast.parse(source.path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.match(node.value):
            yield node.lineno, node.value.split(":")[0]


def resolve(name: str, known: dict[str, Source]) -> str | None:
    """The module `name` runs: itself, or the nearest enclosing module (an attribute's)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def graph(known: dict[str, Source]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, source in known.items():
        targets = {resolve(name, known) for _, name in imported(source)}
        edges[module] = {t for t in targets if t is not None and t != module}
    return edges


def circle(known: dict[str, Source]) -> list[str]:
    """One circle of imports between files, [] when there is none."""
    try:
        graphlib.TopologicalSorter(graph(known)).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_file_imports_itself_in_a_circle() -> None:
    found = circle(workspace())
    assert not found, "a circle of imports between files: " + " -> ".join(found)


def test_the_circle_scan_sees_deferred_type_only_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "retrain" / "models"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from retrain.models import family\n")
    (pkg / "family.py").write_text("def families():\n    from retrain.models import gemma\n")
    (pkg / "gemma.py").write_text("from .family import Family\n")
    known = sources({"m": tmp_path})
    assert set(circle(known)) == {"retrain.models.family", "retrain.models.gemma"}
    (pkg / "family.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from retrain.models.gemma import Gemma\n")
    assert set(circle(known)) == {"retrain.models.family", "retrain.models.gemma"}
    (pkg / "family.py").write_text("class Family: ...\n")  # the package's __init__ is no circle
    assert circle(known) == []


#: the local backend's floors, lowest first: a file names nothing on a higher floor
LOCAL_FLOORS = {"retrain.models": 1, "retrain.inference_engine": 2, "retrain.backends.local": 3}


def floor(module: str) -> int | None:
    return next((n for root, n in LOCAL_FLOORS.items() if module == root or module.startswith(root + ".")), None)


def upward(known: dict[str, Source]) -> list[str]:
    found = []
    for module, source in known.items():
        own = floor(module)
        if own is None:
            continue
        for line, name in [*imported(source), *dotted_strings(source)]:
            other = floor(name)
            if other is not None and other > own:
                found.append(f"{source.path.name}:{line} ({module}) names {name}")
    return found


def test_local_backend_floors_point_down() -> None:
    known = workspace()
    assert {floor(m) for m in known if known[m].member == "retrain-backends-local"} == {1, 2, 3}
    assert not upward(known), upward(known)


def test_the_floor_scan_sees_imports_and_dotted_paths(tmp_path: Path) -> None:
    models = tmp_path / "retrain" / "models"
    models.mkdir(parents=True)
    (models / "a.py").write_text("def f():\n    from retrain.inference_engine.pytorch import x\n"
                                 "T = 'retrain.backends.local.backend:LocalBackend'\n"
                                 "from retrain.models import b\n")
    found = upward(sources({"m": tmp_path}))
    assert [f.split(" names ")[1] for f in found] == ["retrain.inference_engine.pytorch.x",
                                                      "retrain.backends.local.backend"]


CLI, ENVS, KERNELS = "retrain-cli", "retrain-envs", "retrain-kernels"
LOCAL, TINKER, UNSLOTH = "retrain-backends-local", "retrain-backends-tinker", "retrain-backends-unsloth"
BACKENDS = frozenset({LOCAL, TINKER, UNSLOTH})

#: core module -> (the distributions that may import it, why). Plugins (backends, envs,
#: kernels) reach the contracts they implement and small shared helpers; the CLI, the front
#: end of every core package, reaches further, and each reach is still named.
CORE_SURFACE: dict[str, tuple[frozenset[str], str]] = {
    "retrain.errors": (frozenset({CLI, ENVS, KERNELS, LOCAL, TINKER}),
                       "UserError, the one base of a problem the user fixes"),
    "retrain.types": (frozenset({CLI, ENVS, LOCAL, TINKER}),
                      "the records that cross package boundaries (samples, datums, step results)"),
    "retrain.config.schema": (BACKENDS | {CLI, ENVS}, "TrainConfig, what every plugin is built from"),
    "retrain.config.sft_loss": (frozenset({CLI, LOCAL, TINKER}), "the SFT loss a run uses, read by each backend"),
    "retrain.config.folders": (frozenset({LOCAL}), "where a run writes its adapters"),
    "retrain.backends.protocol": (frozenset({CLI, ENVS}), "the backend contract (Tokenizer, Backend)"),
    "retrain.backends.catalog": (BACKENDS | {CLI}, "BackendDefinition and capabilities a backend registers"),
    "retrain.backends.options": (BACKENDS, "the option schema a backend's definition declares"),
    "retrain.backends.errors": (frozenset({TINKER, UNSLOTH}), "BackendUnavailable, shared by backends"),
    "retrain.backends.export": (frozenset({CLI, LOCAL}), "the export contract between `retrain export` and a backend"),
    "retrain.backends.objective": (frozenset({CLI, LOCAL, TINKER}), "what a policy loss asks of a backend"),
    "retrain.backends.seeds": (frozenset({LOCAL, TINKER}), "seeds of sampling requests sent to a server"),
    "retrain.backends.serving": (frozenset({CLI, ENVS, LOCAL}), "the serving contract of `retrain serve`"),
    "retrain.backends.token_generate": (frozenset({CLI, ENVS}), "the token-in/token-out endpoint retrain's servers speak"),
    "retrain.backends.tokenizer": (frozenset({LOCAL, TINKER}), "a Hugging Face tokenizer behind the core protocol"),
    "retrain.backends.body_limit": (frozenset({CLI, ENVS}), "the request-body cap of a retrain server"),
    "retrain.environments.protocol": (frozenset({CLI, ENVS}), "the environment contract a provider registers"),
    "retrain.rollout.episode": (frozenset({ENVS}), "multi-turn episodes and segments, the environment contract"),
    "retrain.rollout.group": (frozenset({ENVS}), "a step's sampled groups, what environments return"),
    "retrain.rollout.sample": (frozenset({ENVS}), "single-turn sampling through the training backend"),
    "retrain.rollout.stitch": (frozenset({ENVS}), "segments from turns that report whole prompts (ECHO)"),
    "retrain.rewards.judge.errors": (frozenset({ENVS, LOCAL}), "how a judge request fails, for judge clients"),
    "retrain.rewards.judge.verdict": (frozenset({ENVS}), "what a judge is asked, for the verifiers judge client"),
    "retrain.teacher.protocol": (frozenset({LOCAL}), "the distillation teacher contract the local teacher implements"),
    "retrain.teacher.tokens": (frozenset({LOCAL}), "the teacher-student tokenizer check"),
    "retrain.io.atomic": (frozenset({CLI, LOCAL, TINKER}), "crash-safe file writes"),
    "retrain.io.digest": (frozenset({LOCAL}), "a file's sha256 in blocks"),
    "retrain.io.http": (frozenset({CLI, ENVS, LOCAL, TINKER}), "every HTTP request's deadline and size cap"),
    "retrain.io.layout": (frozenset({CLI, LOCAL}), "the names of the files in a run directory"),
    "retrain.plugins.resolve": (frozenset({CLI, ENVS, LOCAL}), "dotted-path plugins"),
    "retrain.process.cpus": (frozenset({CLI, LOCAL}), "the CPUs this process may use"),
    "retrain.process.spans": (frozenset({LOCAL}), "wall-clock spans of a step's phases"),
    "retrain.process.world": (frozenset({CLI, LOCAL, UNSLOTH}), "the processes one run trains on (torchrun)"),
    "retrain.registry.builtin": (frozenset({CLI, LOCAL}), "built-in names; the local backend reads the engines' default URLs"),
    "retrain.validation.runtime": (frozenset({LOCAL}), "several_processes: the local backend refuses what a torchrun "
                                                       "run cannot do in the words loading uses"),
    "retrain.backends.create": (frozenset({CLI}), "`retrain serve` and `eval` build the configured backend"),
    "retrain.config": (frozenset({CLI}), "the config package's names, for the CLI's flags"),
    "retrain.config.env": (frozenset({CLI}), "`.env` loading at the CLI's start"),
    "retrain.config.errors": (frozenset({CLI}), "config problems, raised by campaign and tree files"),
    "retrain.config.fields": (frozenset({CLI}), "the flat field table behind flags, `man` and campaigns"),
    "retrain.config.migrate": (frozenset({CLI}), "`retrain migrate-config`"),
    "retrain.config.override": (frozenset({CLI}), "CLI overrides"),
    "retrain.config.snapshot": (frozenset({CLI}), "the redacted snapshot `explain` shows"),
    "retrain.config.source": (frozenset({CLI}), "reading a TOML file, for campaigns"),
    "retrain.data.chat": (frozenset({CLI}), "prompts as the model reads them, for `retrain data`"),
    "retrain.data.source": (frozenset({CLI}), "the examples `retrain data` and `eval` load"),
    "retrain.environments.catalog": (frozenset({CLI}), "the environment providers `retrain backends` lists"),
    "retrain.evaluation.evaluate": (frozenset({CLI}), "`retrain eval`"),
    "retrain.evaluation.problems": (frozenset({CLI}), "the held-out problems `data` and `eval` load"),
    "retrain.evaluation.row": (frozenset({CLI}), "eval rows status, diff and campaigns read"),
    "retrain.evaluation.settings": (frozenset({CLI}), "whether a run evaluates, for `data` and `eval`"),
    "retrain.io.json": (frozenset({CLI}), "JSON readers that tolerate a torn file"),
    "retrain.metrics.scan": (frozenset({CLI}), "metrics readers for status, campaigns and trees"),
    "retrain.process.gpus": (frozenset({CLI}), "whether a GPU shows, for `init` and `machine`"),
    "retrain.registry.contract": (frozenset({CLI}), "contract versions `doctor` and `backends` report"),
    "retrain.registry.core": (frozenset({CLI}), "name -> implementation, for serve, export and doctor"),
    "retrain.registry.entry_points": (frozenset({CLI}), "the registered names `retrain backends` lists"),
    "retrain.registry.health": (frozenset({CLI}), "dependency probes and install hints for `doctor` and `version`"),
    "retrain.rewards.create": (frozenset({CLI}), "the configured reward, for `trace` and `eval`"),
    "retrain.training.console": (frozenset({CLI}), "the Reporter the CLI's progress bar implements"),
    "retrain.training.faults": (frozenset({CLI}), "fault injection points campaigns honour in crash tests"),
    "retrain.training.idle": (frozenset({CLI}), "idle steps, reported by status"),
    "retrain.training.interrupt": (frozenset({CLI}), "the stop signals a run and a campaign worker handle"),
    "retrain.training.resume": (frozenset({CLI}), "what a checkpoint restores, for `explain`"),
    "retrain.training.resume_check": (frozenset({CLI}), "`retrain resume-check`"),
    "retrain.training.sft.data": (frozenset({CLI}), "the SFT rows `data` and `trace` show"),
    "retrain.training.state": (frozenset({CLI}), "trainer_state.json, read by export and eval"),
    "retrain.training.trainers": (frozenset({CLI}), "running the configured trainer"),
    "retrain.validation": (frozenset({CLI}), "the validation package's names, for campaigns"),
    "retrain.validation.backend": (frozenset({CLI}), "a backend's catalog entry and options, for campaigns and `machine`"),
    "retrain.validation.built": (frozenset({CLI}), "what is not built yet, for `man` and `plugins`"),
    "retrain.validation.data": (frozenset({CLI}), "the data files opened as a run opens them"),
    "retrain.validation.dependencies": (frozenset({CLI}), "what a run needs installed, for `explain`"),
    "retrain.validation.inert": (frozenset({CLI}), "the keys a config leaves inert, for `man`"),
    "retrain.validation.load": (frozenset({CLI}), "load_config, the one way a file becomes a config"),
    "retrain.validation.trace": (frozenset({CLI}), "`retrain trace` and `explain`"),
}


def core_reaches(known: dict[str, Source]) -> dict[str, dict[str, list[str]]]:
    """{core module: {member: [file:line, ...]}} for what each other member imports from core."""
    core = {m: s for m, s in known.items() if s.member == "retrain-core"}
    found: dict[str, dict[str, list[str]]] = {}
    for source in known.values():
        if source.member == "retrain-core":
            continue
        for line, name in imported(source):
            target = resolve(name, core) if name.startswith("retrain.") else None
            if target is not None:
                where = f"{source.path.relative_to(source.path.parents[len(source.package)])}:{line}"
                found.setdefault(target, {}).setdefault(source.member, []).append(where)
    return found


def test_what_other_distributions_import_from_core_is_listed_with_its_reason() -> None:
    reaches = core_reaches(workspace())
    unlisted = {f"{member} imports {module} ({places[0]})"
                for module, by in reaches.items() for member, places in by.items()
                if member not in CORE_SURFACE.get(module, (frozenset(), ""))[0]}
    assert not unlisted, sorted(unlisted)
    assert all(reason for _, reason in CORE_SURFACE.values())
    stale = set(CORE_SURFACE) - set(reaches)
    assert not stale, f"CORE_SURFACE entries nothing imports: {sorted(stale)}"
