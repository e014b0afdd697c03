"""The pages a newcomer reads first say what happens: every command in a ```bash block of
README.md and docs/getting-started.md runs here as written, or shortened where it would take
minutes, or is listed with why it is not run and what checks it instead; what each prints has
the shape the pages show. docs/training.md's sample of the demo's output has the lines a real
run prints, with the demo's own step counts, and every page that states the demo's time
states the same one.

Commands run in this process (tests/tiny_run.py: the real entry point, its arguments, exit
status and output), from a folder laid out like a clone (the demo's retrain.toml in it), with
the hub offline as the whole suite runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
from tiny_run import retrain_in

from retrain.commands.init.templates import TEMPLATES
from retrain.io.log import read_jsonl
from retrain.process.gpus import gpu_visible
from retrain.validation.load import load_config

REPO = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/getting-started.md")
#: the demo's time, in these words on every page that states it (105 s wall, 400 RL steps in 100.7 s,
#: measured on the 2-core development machine, quiet, 2026-12-07)
DEMO_TIME = "about 2 minutes on 2 CPU cores"
STATES_DEMO_TIME = ("README.md", "docs/getting-started.md", "docs/training.md", "retrain.toml",
                    "packages/retrain-cli/src/retrain/commands/init/templates/cpu.toml",
                    "packages/retrain-cli/src/retrain/commands/manual/topics/quickstart.txt")

#: commands run as written, in page order in one folder: exit status and lines of stdout
AS_WRITTEN: dict[str, tuple[int, list[str]]] = {
    "uv run retrain --help": (0, ["Commands:", "  init "]),
    "uv run retrain init --list": (0, ["Available templates:", *(f"  {name} " for name in TEMPLATES)]),
    "uv run retrain man configuration": (0, ["CONFIGURATION", "max_steps"]),
    "uv run retrain backends": (0, ["Backends:", "  local     available"]),
    "uv run retrain doctor": (0, ["retrain distributions:"]),
    "uv run retrain init -t cpu --output first.toml": (0, ["Created first.toml (template: cpu)"]),
    "uv run retrain explain first.toml": (0, ["retrain explain — dry-run preview (single)", ": maxrl+none",
                                              ": logs/cpu"]),
    "uv run retrain trace first.toml": (0, ["Condition: maxrl+none", "PASS"]),
    "uv run retrain init -t smollm2 --output smollm2.toml": (0, ["Created smollm2.toml (template: smollm2)"]),
    "uv run retrain init -t quickstart --output gpu.toml": (0, ["Created gpu.toml (template: quickstart)"]),
}
#: commands run shortened, by the test named
SHORTENED = {
    "uv run retrain": "test_the_demo_prints_what_the_pages_show: 20 RL steps of 4 prompts instead of 400 of 16",
    "uv run retrain first.toml": "test_the_first_config_trains: 1 warmup step and 1 RL step",
}
#: commands not run here, why, and what checks them instead
NOT_RUN = {
    "uv run pytest -n 2": "the fast tier itself (minutes); test_the_test_commands checks what it selects",
    "make test-all": "every test (about an hour); test_the_test_commands checks the command it runs",
    "uv run retrain init -i --output mine.toml": "needs a terminal: packages/retrain-cli/tests/"
    "test_cli_init_interactive.py answers it on a pseudo-terminal; test_init_writes_files_of_their_own "
    "checks its refusal without one",
}


def blocks(page: str, lang: str) -> list[str]:
    text = (REPO / page).read_text(encoding="utf-8")
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.M | re.S)


def commands(page: str) -> list[str]:
    """The commands of a page's bash blocks, comments and spacing dropped."""
    lines = (line.split("#", 1)[0].strip() for block in blocks(page, "bash") for line in block.splitlines())
    return [" ".join(line.split()) for line in lines if line]


def argv(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[:3] == ["uv", "run", "retrain"], command
    return words[3:]


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A folder laid out like a clone's root: the demo's retrain.toml in it."""
    (tmp_path / "retrain.toml").write_text((REPO / "retrain.toml").read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_every_command_of_the_pages_is_checked() -> None:
    on_pages = {c for page in PAGES for c in commands(page)}
    checked = {*AS_WRITTEN, *SHORTENED, *NOT_RUN}
    assert on_pages - checked == set(), "a command of the pages this file does not check"
    assert checked - on_pages == set(), "a command this file checks that no page shows any more"


def test_the_demos_time_is_stated_alike_everywhere() -> None:
    def prose(path: str) -> str:  # lines joined, comment marks of wrapped comments dropped
        return re.sub(r"\s*\n\s*#?\s*", " ", (REPO / path).read_text(encoding="utf-8"))

    stale = [path for path in STATES_DEMO_TIME if DEMO_TIME not in prose(path)]
    assert not stale, f"these do not state the demo's time as {DEMO_TIME!r}: {stale}"


def test_commands_run_as_written_print_what_the_pages_say(clone: Path) -> None:
    for command in (c for page in PAGES for c in commands(page) if c in AS_WRITTEN):
        code, lines = AS_WRITTEN[command]
        res = retrain_in(clone, *argv(command))
        assert res.returncode == code, (command, res.stdout[-2000:], res.stderr[-2000:])
        missing = [line for line in lines if line not in res.stdout]
        assert not missing, (command, missing, res.stdout[-2000:])
        # nothing but retrain's own warnings on stderr: a GPU config on a machine without one
        assert all(line.startswith(("warning:", "  ")) for line in res.stderr.splitlines()), (command, res.stderr)
    # the page: those marked [needs a CUDA GPU] train Qwen3-4B
    for t in (t for t in TEMPLATES.values() if t.gpu and t.filename == "retrain.toml"):
        (clone / f"{t.name}.toml").write_text(t.text())
        assert load_config(str(clone / f"{t.name}.toml")).config.model.model == "Qwen/Qwen3-4B-Instruct-2507"
    assert "[model]\nmodel = \"tiny\"" in (clone / "first.toml").read_text()


def test_init_writes_files_of_their_own(clone: Path) -> None:
    """The page's reason for --output: init never overwrites, and the clone has a retrain.toml."""
    res = retrain_in(clone, "init", "-t", "cpu")
    assert res.returncode == 2 and "error: retrain.toml already exists — refusing to overwrite" in res.stderr
    res = retrain_in(clone, *argv("uv run retrain init -i --output mine.toml"))
    assert res.returncode == 2 and "retrain init -i needs a terminal" in res.stderr
    assert not (clone / "mine.toml").exists()
    if not gpu_visible():
        res = retrain_in(clone, *argv("uv run retrain init -t quickstart --output gpu.toml"))
        assert "Note: this template trains Qwen3-4B on a CUDA GPU, and none is visible here" in res.stdout


def test_the_test_commands() -> None:
    """`uv run pytest -n 2` is the fast tier on two workers; `make test-all` runs both tiers."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "-m 'not slow'" in pyproject["tool"]["pytest"]["ini_options"]["addopts"]
    pytest.importorskip("xdist")
    made = subprocess.run(["make", "-n", "test-all"], cwd=REPO, capture_output=True, text=True, check=True)
    assert 'pytest -n 2 -m "slow or not slow"' in made.stdout


def shape(line: str) -> str:
    """A line's shape: each number (or the page's `...` for one) stands for any number."""
    return re.sub(r"[-+]?\d+(\.\d+)?|\.\.\.", "N", line.rstrip())


def test_the_demo_prints_what_the_pages_show(clone: Path) -> None:
    """`uv run retrain` shortened to 20 RL steps of 4 prompts (the summary's windows are 10
    steps from 20 on; the warmup is the demo's, so RL has rewards that differ) prints every
    kind of line docs/training.md's sample shows; the sample's step counts are the demo's; a
    second run stops at once, as README.md says."""
    demo = tomllib.loads((clone / "retrain.toml").read_text())
    shortened = ("--max-steps", "20", "--batch-size", "4")
    res = retrain_in(clone, *shortened)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stderr == ""
    printed = res.stdout.splitlines()
    shapes = {shape(line) for line in printed}
    (sample,) = [b for b in blocks("docs/training.md", "text") if b.startswith("retrain: retrain.toml: loading")]
    unlike = [line for line in sample.splitlines() if line != "..." and shape(line) not in shapes]
    assert not unlike, (unlike, printed)
    shown = {shape(line) for line in sample.splitlines()}
    left_out = [line for line in printed if shape(line) not in shown]
    assert not left_out, f"lines the demo prints that the sample has none like: {left_out}"
    steps, warmup = demo["training"]["max_steps"], demo["training"]["sft_warmup_steps"]
    assert f", steps={steps}, warmup={warmup}, log_dir=logs/demo" in sample
    assert f"warmup {warmup}/{warmup} " in sample and f"step {steps - 1} " in sample
    assert f"Training complete: maxrl+none, {steps} RL steps in" in sample
    assert f"eval after {steps} RL steps:" in sample and f"after {steps} RL steps: pass@1=" in sample
    held = {row["eval/examples"] for row in read_jsonl(clone / "logs" / "demo" / "eval.jsonl")}
    assert held == {16} and "(16 held-out problems, " in sample and "held-out (16 problems)" in sample
    assert "16 with the\ndemo's `seed = 0`" in (REPO / "docs" / "training.md").read_text()
    assert len(read_jsonl(clone / "logs" / "demo" / "metrics.jsonl")) == warmup + 20
    assert (clone / "adapters" / "demo" / "final").is_dir()

    again = retrain_in(clone, *shortened)
    assert again.returncode == 2 and "error: logs/demo already holds a run" in again.stderr


def test_the_first_config_trains(clone: Path) -> None:
    retrain_in(clone, *argv("uv run retrain init -t cpu --output first.toml"))
    res = retrain_in(clone, *argv("uv run retrain first.toml"), "--max-steps", "1", "--sft-warmup-steps", "1",
                     "--no-eval-before-train", "--no-eval-at-end")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Training complete: maxrl+none, 1 RL step in" in res.stdout or \
        "Run complete, nothing trained: maxrl+none, 1 RL step in" in res.stdout
    assert "  final adapter: adapters/cpu/final" in res.stdout and (clone / "logs" / "cpu" / "metrics.jsonl").is_file()


def test_the_minimal_file_means_a_gpu_and_the_hub(clone: Path) -> None:
    """What getting-started says of its minimal file: the defaults it takes, and a run here
    stops with one line and exit status 2 (the hub is offline in tests)."""
    (minimal,) = [b for b in blocks("docs/getting-started.md", "toml") if 'log_dir = "logs/mini"' in b]
    (clone / "mini.toml").write_text(minimal)
    res = retrain_in(clone, "explain", "mini.toml")
    assert res.returncode == 0, res.stderr
    for default in (": Qwen/Qwen3-4B-Instruct-2507", ": gpu:0", ": math"):
        assert default in res.stdout, default
    if not gpu_visible():
        assert "no GPU is visible on this machine" in res.stdout
    res = retrain_in(clone, "mini.toml", "--max-steps", "5", "--lr", "1e-4")
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and ("[data] path" in errors[0] or "[model] model" in errors[0])
    assert "Traceback" not in res.stderr


def test_a_config_problem_prints_as_the_page_shows(clone: Path) -> None:
    """getting-started's sample of three problems in one file is what such a file prints."""
    (sample,) = [b for b in blocks("docs/getting-started.md", "text") if b.startswith("error: 3 config problems")]
    lines = ['[algorithm]', 'advantage_mode = "grpo"', 'transform_mode = "none"', '', '[training]',
             'batch_size = -2', 'group_size = 8', 'max_tokens = 1024', 'temprature = 0.7', '', '[backend]',
             '[backend.options]', 'train_microbatch = 4']
    (clone / "mini.toml").write_text("\n".join(lines) + "\n")
    res = retrain_in(clone, "explain", "mini.toml")
    assert res.returncode == 2 and res.stderr == sample
