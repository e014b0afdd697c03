"""A million-row table through `[data] source = "dataset"`: how long a run takes to start its
first step, and how much memory the data holds (JSON).

The script writes a GSM8K-shaped parquet itself (`question`, `answer` ending `#### N`; 1,000,000
rows by default, about 60 MB compressed, 560 MB as Arrow) into a temporary folder, then:

- `start`: `retrain run.toml` (the tiny model on the CPU, `answer_pattern = "gsm8k"`, one RL
  step) in a process of its own, with `datasets`' cache empty (`cold`: the parquet is converted
  to Arrow once) and then filled (`warm`), and the same run on the `arithmetic` source
  (`arithmetic`: what starting costs without a table). Times are from the process's launch to
  the line the run prints as it starts its first step (`start_s`) and to that step's line
  (`first_step_s`); `cpu_s` is the process's CPU time, which other work on the machine slows
  less than its wall time (`load_average` is the machine's when the script starts).
- `load`: in a fresh process, first into an empty `datasets` cache (`cold`), then again
  (`warm`): the CPU time of importing what reading a table needs (`import_cpu_s`), the time and
  CPU time of loading the training side (`load_s`, `load_cpu_s`: opening the table, the pass
  over every row, the seeded order), and the resident set before and after that load and the
  encoding of the first batch of prompts; `data_mb` is the growth, split into anonymous memory
  and pages of mapped files (`RssAnon`, `RssFile` of /proc/self/status). These are the table's
  own costs, which the whole run's times above add to what starting costs anyway.

    uv run python scripts/bench/data.py                # 1,000,000 rows
    uv run python scripts/bench/data.py --rows 100000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = """
[model]
model = "tiny"
[backend]
devices = "cpu"
[data]
source = "dataset"
path = "{root}/gsm8k.parquet"
prompt_key = "question"
answer_key = "answer"
answer_pattern = "gsm8k"
[training]
seed = 0
max_steps = 1
batch_size = 8
group_size = 4
max_tokens = 16
save_every = 0
[logging]
log_dir = "{root}/logs/{name}"
"""

MEMORY = """
import json, sys, time
def rss():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith(("VmRSS", "RssAnon", "RssFile")))
    return {k: int(v.split()[0]) / 1024 for k, v in fields.items()}
from retrain.validation.load import load_config
t0 = time.process_time()
import datasets, pyarrow
from retrain.data.source import load_examples
from retrain.data.table import source
from retrain.training.prompts import PromptCursor
imports = time.process_time() - t0
class Chars:
    eos_token_ids = (0,)
    def encode_prompt(self, text): return [ord(c) for c in text]
# the same path on a small table first, so that the modules it imports on the way are in `before`
PromptCursor(load_examples(load_config(sys.argv[2], []).config), Chars()).take(8)
config = load_config(sys.argv[1], []).config
before = rss()
t0, c0 = time.perf_counter(), time.process_time()
examples = load_examples(config)
loaded, loaded_cpu = time.perf_counter() - t0, time.process_time() - c0
PromptCursor(examples, Chars()).take(config.training.batch_size)
after = rss()
print(json.dumps({"examples": len(examples), "import_cpu_s": round(imports, 2), "load_s": round(loaded, 2),
                  "load_cpu_s": round(loaded_cpu, 2), "before": before, "after": after}))
"""


def write_table(path: Path, rows: int) -> float:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rng = random.Random(0)
    chunk = 100_000
    writer = None
    for start in range(0, rows, chunk):
        questions, answers = [], []
        for i in range(start, min(rows, start + chunk)):
            a, b = rng.randrange(2, 500), rng.randrange(2, 50)
            questions.append(f"Natalia sold clips to {a} of her friends in April, and then she sold {b} more clips "
                             f"in May than in April. How many clips did Natalia sell altogether in April and May? "
                             f"(problem {i})")
            answers.append(f"Natalia sold {a}+{b} = <<{a}+{b}={a + b}>>{a + b} clips in May.\n"
                           f"Natalia sold {a}+{a + b} = <<{a}+{a + b}={2 * a + b}>>{2 * a + b} clips altogether "
                           f"in April and May.\n#### {2 * a + b}")
        table = pa.table({"question": questions, "answer": answers})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()
    return time.perf_counter() - t0


def start(root: Path, name: str, env: dict[str, str], source: str = "dataset") -> dict[str, float | int]:
    cfg = root / f"{name}.toml"
    text = CONFIG.format(root=root, name=name)
    if source != "dataset":  # the same run without a table: what starting costs on this machine anyway
        text = re.sub(r"\[data\]\n.*?(?=\[training\])", f'[data]\nsource = "{source}"\n', text, flags=re.S)
    cfg.write_text(text)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "retrain.cli", str(cfg)], cwd=root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    times: dict[str, float | int] = {}
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("retrain: condition=") and "start_s" not in times:
            times["start_s"] = round(time.perf_counter() - t0, 2)
        if line.startswith("step 0 ") and "first_step_s" not in times:
            times["first_step_s"] = round(time.perf_counter() - t0, 2)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = times["exit"] = os.waitstatus_to_exitcode(status)
    times["total_s"] = round(time.perf_counter() - t0, 2)
    times["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)  # the whole process, user and system
    if times["exit"] != 0 or "first_step_s" not in times:
        raise SystemExit("the run failed:\n" + "".join(lines[-20:]))
    return times


def memory(root: Path, env: dict[str, str]) -> dict[str, object]:
    """The load in a fresh process: `cold` into an empty `datasets` cache, then `warm`."""
    write_table(root / "small" / "gsm8k.parquet", 1000)
    (root / "small.toml").write_text(CONFIG.format(root=root / "small", name="small"))
    out: dict[str, object] = {}
    for name, cache in (("cold", root / "probe-cache"), ("warm", root / "probe-cache")):
        done = subprocess.run([sys.executable, "-c", MEMORY, str(root / "cold.toml"), str(root / "small.toml")],
                              cwd=root, env={**env, "HF_DATASETS_CACHE": str(cache)}, capture_output=True, text=True,
                              check=True)
        found = json.loads(done.stdout.strip().splitlines()[-1])
        before, after = found.pop("before"), found.pop("after")
        out[name] = {**found, "rss_before_mb": round(before["VmRSS"]), "rss_after_mb": round(after["VmRSS"]),
                     "data_mb": round(after["VmRSS"] - before["VmRSS"]),
                     "data_anon_mb": round(after["RssAnon"] - before["RssAnon"]),
                     "data_file_mb": round(after["RssFile"] - before["RssFile"])}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="retrain-bench-data-") as tmp:
        root = Path(tmp)
        made = write_table(root / "gsm8k.parquet", args.rows)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_DATASETS_CACHE": str(root / "datasets-cache"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS",
                                                                                                     "2")}
        load = os.getloadavg()[0]
        baseline = start(root, "arithmetic", env, source="arithmetic")
        cold = start(root, "cold", env)
        warm = start(root, "warm", env)
        print(json.dumps({"rows": args.rows, "parquet_mb": round((root / "gsm8k.parquet").stat().st_size / 2**20, 1),
                          "write_s": round(made, 1), "cpus": os.cpu_count(), "load_average": round(load, 1),
                          "start": {"cold": cold, "warm": warm, "arithmetic": baseline},
                          "load": memory(root, env)}))


if __name__ == "__main__":
    main()
