"""The `retrain` command.

`retrain [CONFIG] [--flag value ...]` runs a config (./retrain.toml by default); every other
verb is a subcommand. Command modules (and `retrain.commands.errors`) are imported only when
their verb runs, so `--help` loads typer and this file alone, and the non-training commands
never import torch (tests assert both).

No `from __future__ import annotations` here: typer reads every command's signature at each
start, and string annotations would make it compile and eval each `Annotated[...]` twice per
command, about two thirds of `--help`'s time after importing typer.
"""

from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

RUN_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def guarded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    from retrain.commands.errors import guarded as run_guarded

    return run_guarded(fn, *args, **kwargs)


class DefaultRunGroup(TyperGroup):
    """Routes anything that is not a known verb (a path, a --flag) to the hidden `run` verb.

    A first argument shaped like a verb (a bare word: no dot, no slash) that names neither a
    verb nor an existing file is an unknown command, not a config that is missing."""

    default = "run"
    own_options: tuple[str, ...] = ("--help", "-h", "--version")
    verbs_only = True  # False where the default verb takes a bare word (status's LOGDIR)

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        if not args or (args[0] not in self.commands and args[0] not in self.own_options):
            if args and self.verbs_only:
                self._refuse_unknown_verb(args[0])
            args = [self.default, *args]
        return super().parse_args(ctx, args)

    def _refuse_unknown_verb(self, word: str) -> None:
        import os
        import re

        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", word) or os.path.exists(word):
            return
        import difflib

        from retrain.commands.errors import fail

        verbs = [name for name, cmd in self.commands.items() if not cmd.hidden]
        close = difflib.get_close_matches(word, verbs, n=1, cutoff=0.6)
        fail(f"unknown command {word!r}" + (f", did you mean {close[0]!r}?" if close else ""),
             hint=f"`retrain --help` lists the commands; to run a config, pass its path (e.g. {word}.toml)")

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        return [name for name in self.commands if name != self.default]


class StatusGroup(DefaultRunGroup):
    """`retrain status [LOGDIR] [flags]` (hidden `show`, which also answers --help) and
    `retrain status serve ...`."""

    default = "show"
    own_options = ()
    verbs_only = False


class StatusShowCommand(TyperCommand):
    """The hidden `show` verb presents itself as plain `retrain status` in usage lines."""

    def format_usage(self, ctx: typer.Context, formatter: Any) -> None:  # type: ignore[override]
        path = ctx.parent.command_path if ctx.parent else ctx.command_path
        formatter.write_usage(path, " ".join(self.collect_usage_pieces(ctx)))


app = typer.Typer(
    cls=DefaultRunGroup,
    name="retrain",
    help=(
        "TOML-first RLVR trainer. `retrain [CONFIG.toml] [--flag value ...]` trains "
        "(./retrain.toml when no file is given); the commands below inspect, explain and "
        "scaffold. Every config key is also a flag: see `retrain man --topic options`."
    ),
    add_completion=False,
    no_args_is_help=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        from retrain.commands.version import versions_text

        typer.echo(versions_text())
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the installed retrain distributions.")] = False,
) -> None:
    from retrain.config.env import load_dotenv

    load_dotenv()


@app.command("run", context_settings=RUN_CONTEXT, hidden=True)
def run_cmd(ctx: typer.Context) -> None:
    """Run CONFIG (single run, campaign or squeeze, detected from its tables)."""
    from retrain.commands.run import run as run_config

    guarded(run_config, list(ctx.args))


@app.command("explain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[CONFIG] [--flag value ...] [--json]")
def explain_cmd(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Dry run of CONFIG (default ./retrain.toml) with any override flags: the resolved
    condition, sizes, backend capabilities and warnings. Trains nothing, imports no torch."""
    from retrain.commands.explain.run import run

    guarded(run, list(ctx.args), as_json)


@app.command("trace", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[CONFIG] [--flag value ...] [--json]")
def trace_cmd(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Preflight of CONFIG's training flow: backend capabilities against the algorithm, and the
    advantage pipeline on synthetic groups. Exit 1 on FAIL, with the reason. No GPU, no torch."""
    from retrain.commands.trace.run import run

    guarded(run, list(ctx.args), as_json)


@app.command("data", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[CONFIG] [--flag value ...] [-n N] [--lengths N] [--json]")
def data_cmd(
    ctx: typer.Context,
    count: Annotated[int, typer.Option("-n", "--count", min=0, metavar="N", help="Prompts to show.")] = 3,
    lengths: Annotated[int, typer.Option("--lengths", min=0, metavar="N",
                                         help="Count the token lengths of the first N prompts.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What a run of CONFIG reads: its data opened and checked as the run does, the examples
    loaded and what was dropped and why, and the first prompts exactly as the model will read
    them (through the chat template) with their references. See `retrain man data`."""
    from retrain.commands.data.run import run

    guarded(run, list(ctx.args), count, lengths, as_json)


@app.command("eval")
def eval_cmd(
    config: Annotated[str, typer.Argument(metavar="CONFIG",
                                          help="Config giving the model, backend, sampling, reward and problems.")],
    adapter: Annotated[str | None, typer.Option("--adapter", metavar="DIR", help="Evaluate this adapter folder.")] = None,
    run_dir: Annotated[str | None, typer.Option("--run", metavar="LOG_DIR",
                                                help="Evaluate a run's final adapter (latest checkpoint if unfinished).")] = None,
    all_checkpoints: Annotated[bool, typer.Option("--all-checkpoints",
                                                  help="With --run: every checkpoint_step_N, then final.")] = False,
    k: Annotated[int | None, typer.Option("--k", min=1, metavar="N", help="The k of pass@k and maj@k (default: [eval] k).")] = None,
    n: Annotated[int | None, typer.Option("--n", min=1, metavar="N",
                                          help="Samples per problem, at least k (default: [eval] n, else k).")] = None,
    max_examples: Annotated[int | None, typer.Option("--max-examples", min=0, metavar="N",
                                                     help="Problems to evaluate; 0 = all (default: [eval] max_examples).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Held-out pass@1, pass@k and maj@k of the base model (no option), an adapter, or a run's
    checkpoints, on the config's held-out problems. See `retrain man eval`."""
    from retrain.commands.eval.run import run

    guarded(run, config, adapter=adapter, run_dir=run_dir, all_checkpoints=all_checkpoints, k=k, n=n,
            max_examples=max_examples, as_json=as_json)


@app.command("export")
def export_cmd(
    source: Annotated[str, typer.Argument(metavar="SOURCE",
                                          help="A run's log_dir, a checkpoint folder or an adapter folder.")],
    out: Annotated[str, typer.Option("--out", "-o", metavar="DIR", help="The folder to write (atomically).")],
    format: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT",
                                        help="hf (the LoRA merged into the base), adapter (PEFT) or gguf.")] = "hf",
    dtype: Annotated[str | None, typer.Option("--dtype", metavar="DTYPE",
                                              help="hf, adapter: auto (the base's), float32, bfloat16 or float16.")] = None,
    gguf_type: Annotated[str | None, typer.Option("--gguf-type", metavar="TYPE",
                                                  help="gguf: f16 (default) or q8_0.")] = None,
    checkpoint: Annotated[str | None, typer.Option("--checkpoint", metavar="NAME",
                                                   help="A run's checkpoint_step_N instead of its final adapter.")] = None,
    base: Annotated[str | None, typer.Option("--base", metavar="MODEL",
                                             help="The base model, where SOURCE does not record it.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", metavar="N",
                                             help="The seed of a `tiny` base, where SOURCE does not record it.")] = None,
    max_shard_size: Annotated[str | None, typer.Option("--max-shard-size", metavar="SIZE",
                                                       help="hf: the largest safetensors shard (default 5GB).")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="Read the export back with transformers and compare "
                                                          "it with the trained model; exit 1 when it differs.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out folder.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """A run's trained model as what other tools load: a transformers folder, a PEFT adapter
    for vLLM, or a GGUF for llama.cpp. See `retrain man export`."""
    from retrain.commands.export.run import run

    guarded(run, source, out=out, format=format, dtype=dtype, gguf_type=gguf_type, checkpoint=checkpoint,
            base=base, seed=seed, max_shard_size=max_shard_size, verify=verify, force=force, as_json=as_json)


@app.command("plugins")
def plugins_cmd(
    config: Annotated[str | None, typer.Argument(help="Config whose [plugins] search paths to use.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What every pluggable kind can be set to: built-ins, installed entry points, and plugin
    modules found under the [plugins] search paths."""
    from retrain.commands.plugins.run import run

    guarded(run, config, as_json)


@app.command("init-plugin")
def init_plugin_cmd(
    kind: Annotated[str | None, typer.Option("--kind", "-k", help="transform, advantage, algorithm, reward, "
                                             "planning, data, backend, inference, backpressure, trainer.")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Plugin name (made a Python identifier).")] = None,
    output_dir: Annotated[str, typer.Option("--output-dir", "-o", help="Folder for the plugin module.")] = "plugins",
    with_test: Annotated[bool, typer.Option("--with-test", help="Also write tests/test_NAME_plugin.py.")] = False,
) -> None:
    """Scaffold a plugin module (and a passing test) and print the TOML that selects it."""
    from retrain.commands.plugins.scaffold import run

    guarded(run, kind, name, output_dir, with_test)


@app.command("init")
def init_cmd(
    template: Annotated[str, typer.Option("--template", "-t", help="Template name.")] = "default",
    list_: Annotated[bool, typer.Option("--list", "-l", help="List the templates.")] = False,
    output: Annotated[str | None, typer.Option("--output", "-o", help="File to write (default per template).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    interactive: Annotated[bool, typer.Option("--interactive", "-i",
                                              help="Pick the template and its steps, seed and W&B project at "
                                                   "a terminal.")] = False,
) -> None:
    """Write a starter config from a template."""
    from retrain.commands.init.run import run

    guarded(run, template, list_, output, force, interactive)


@app.command("backends")
def backends_cmd(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """List training backends: built-in and registered, installed or not, with capabilities and options."""
    from retrain.commands.backends.run import run

    guarded(run, as_json)


@app.command("doctor")
def doctor_cmd(
    config: Annotated[str | None, typer.Argument(help="Config whose inference server (or Tinker service) to probe.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Which optional packages, devices and versions are present (never imports torch); with
    CONFIG, whether its [inference] server (or its Tinker service) answers and what it serves."""
    from retrain.commands.doctor.run import run

    guarded(run, as_json, config)


@app.command("man")
def man_cmd(
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Show one topic.")] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Print every topic.")] = False,
    list_topics: Annotated[bool, typer.Option("--list-topics", help="List topic names.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    path: Annotated[bool, typer.Option("--path", help="Print the folder holding the topic files.")] = False,
    positional: Annotated[str | None, typer.Argument(help="Topic (same as --topic).")] = None,
) -> None:
    """The manual: topics shipped with retrain (quickstart, configuration, options, ...). Alone,
    the list of topics; TOPIC shows one, --all prints them all."""
    from retrain.commands.manual.run import run

    guarded(run, topic or positional, list_topics, as_json, path, show_all)


@app.command("resume-check")
def resume_check_cmd(
    log_dir: Annotated[str, typer.Argument(help="The run's log directory.")],
    config: Annotated[str | None, typer.Option(
        "--config", help="The config the resume will run with (its max_steps and log_dir are checked).")] = None,
    max_steps: Annotated[int | None, typer.Option("--max-steps", help="Override the run's max_steps.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Can this run be resumed, and from which step? Exit 1 when it cannot."""
    from retrain.commands.resume_check import run

    guarded(run, log_dir, max_steps, as_json, config)


@app.command("migrate-config")
def migrate_cmd(
    config: Annotated[str | None, typer.Argument(help="Config file to migrate.")] = None,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when a migration is needed.")] = False,
    write: Annotated[bool, typer.Option("--write", help="Rewrite the file in place.")] = False,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write the result here.")] = None,
    backup: Annotated[bool, typer.Option("--backup", help="With --write: keep CONFIG.bak.")] = False,
    stdin: Annotated[bool, typer.Option("--stdin", help="Read the config from standard input.")] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="Print the migrated TOML.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable report.")] = False,
) -> None:
    """Move legacy keys to their current place (preview by default)."""
    from retrain.commands.migrate.run import run

    guarded(run, config, check=check, write=write, output=output, backup=backup, stdin=stdin,
            stdout=stdout, as_json=as_json)


@app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[CONFIG] [--host H] [--port N] [--api-key K] [--adapter-root DIR] [--flag value ...]")
def serve_cmd(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0 picks a free one).")] = 8000,
    api_key: Annotated[str | None, typer.Option(
        "--api-key", help="Require Authorization: Bearer KEY (default: $RETRAIN_SERVE_API_KEY).")] = None,
    adapter_root: Annotated[str | None, typer.Option(
        "--adapter-root", help="Adapters load only from under this folder (default: [backend] adapter_path).")] = None,
    adapter: Annotated[list[str] | None, typer.Option(
        "--adapter", help="Load NAME=PATH at start (repeatable).")] = None,
) -> None:
    """OpenAI-compatible server of CONFIG's model on retrain's PyTorch engine: /v1/completions,
    /v1/chat/completions (streaming too), /v1/models, vLLM's /v1/load_lora_adapter, /metrics."""
    from retrain.commands.serve.run import run

    guarded(run, list(ctx.args), host, port, api_key, adapter_root, adapter)


status_app = typer.Typer(
    cls=StatusGroup,
    name="status",
    help="Runs and campaigns under LOGDIR (default logs); `retrain status serve` exports them.",
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)
app.add_typer(status_app)


@status_app.command("show", hidden=True, cls=StatusShowCommand)
def status_cmd(
    logdir: Annotated[str, typer.Argument(metavar="LOGDIR", help="Log root to scan.")] = "logs",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    show_all: Annotated[bool, typer.Option("--all", help="Also show ended campaigns idle for over a day.")] = False,
    active: Annotated[bool, typer.Option("--active", help="The default view (overrides --all).")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Refresh until Ctrl-C.")] = False,
    plot: Annotated[str | None, typer.Option("--plot", metavar="FILE.png",
                                             help="Write reward/loss/throughput curves (needs matplotlib).")] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between --watch refreshes.")] = 5.0,
) -> None:
    """Runs and campaigns under LOGDIR: state (running, stale, dead, failed, finished), step,
    reward, loss, throughput; campaigns as condition x seed matrices. `retrain status serve
    --help` describes the Prometheus exporter."""
    from retrain.commands.status.run import run

    guarded(run, logdir, as_json=as_json, show_all=show_all, active=active, watch_=watch, plot=plot,
            interval=interval)


@status_app.command("serve")
def status_serve_cmd(
    logdir: Annotated[str, typer.Argument(metavar="LOGDIR", help="Log root to export.")] = "logs",
    host: Annotated[str, typer.Option("--host", help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port (0 picks a free one).")] = 9108,
    cache_seconds: Annotated[float, typer.Option("--cache-seconds", help="Reuse a scan for this long.")] = 2.0,
) -> None:
    """Prometheus exporter: GET /metrics, /v1/runs (JSON) and /healthz."""
    from retrain.commands.status.serve import run

    guarded(run, logdir, host, port, cache_seconds)


@app.command("top")
def top_cmd(
    logdir: Annotated[str, typer.Argument(metavar="LOGDIR", help="Log root to watch.")] = "logs",
    interval: Annotated[float, typer.Option("--interval", help="Seconds between refreshes.")] = 5.0,
) -> None:
    """Live view of active runs: `retrain status --watch --active`."""
    from retrain.commands.status.top import run

    guarded(run, logdir, interval)


@app.command("diff")
def diff_cmd(
    targets: Annotated[list[str], typer.Argument(metavar="RUN_A RUN_B | CAMPAIGN COND_A COND_B",
                                                 help="Two run folders, or a campaign folder and two conditions.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    plot: Annotated[str | None, typer.Option("--plot", metavar="FILE.png",
                                             help="Write reward/loss/throughput curves (needs matplotlib).")] = None,
) -> None:
    """Compare two runs (or two campaign conditions averaged over seeds): final metrics with
    winners, performance, correct-rate sparklines."""
    from retrain.commands.diff.run import run

    guarded(run, targets, as_json, plot)


@app.command("benchmark", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="CONFIG|RUN_DIR|SUITE_DIR [--repeat N] [--output-dir DIR] [--json] [--flag value ...]")
def benchmark_cmd(
    ctx: typer.Context,
    repeat: Annotated[int, typer.Option("--repeat", help="Runs of CONFIG, each a fresh process.")] = 3,
    output_dir: Annotated[str | None, typer.Option("--output-dir", help="Suite folder (default beside log_dir).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Run CONFIG --repeat times and show the spread (wall, s/step, tokens/s, final reward);
    or summarise a finished run folder or benchmark suite folder."""
    from retrain.commands.benchmark.run import run

    guarded(run, list(ctx.args), repeat, output_dir, as_json)


@app.command("tree", context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
             options_metavar="[next | show NODE | run NODE | note NODE TEXT | eval | reset NODE] [TREE.toml] [--json]")
def tree_cmd(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output (view, show).")] = False,
) -> None:
    """The experiment tree in TREE.toml (default ./tree.toml): nodes that run a config or a
    campaign, a success condition on its metrics, and the nodes each outcome unlocks."""
    from retrain.commands.tree.run import run

    guarded(run, list(ctx.args), as_json)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point."""
    return app(args=argv, prog_name="retrain")


if __name__ == "__main__":
    main()
