"""`retrain data`: the first prompts exactly as the model reads them, with what loading dropped;
and data that cannot be read is one line naming file:line, exit status 2, in `retrain data`,
`trace`, `explain`, `eval` and a run, before anything is written or a model loads."""

from __future__ import annotations

import json
from pathlib import Path

ROWS = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(80)]
CONFIG = """
[model]
model = "tiny"
[backend]
devices = "cpu"
adapter_path = "adapters"
[data]
source = "dataset"
path = "gsm.jsonl"
prompt_key = "question"
answer_key = "answer"
answer_pattern = "gsm8k"
system_prompt = "Answer in boxes."
[training]
max_steps = 1
batch_size = 2
group_size = 2
max_tokens = 4
[logging]
log_dir = "logs"
"""


def write(root: Path, rows: list[dict[str, str]] = ROWS, extra: str = "") -> None:
    (root / "gsm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "c.toml").write_text(CONFIG + extra)


def one_line_exit_2(res, *needles: str) -> None:  # type: ignore[no-untyped-def]
    assert res.code == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    lines = [line for line in res.stderr.splitlines() if not line.startswith("  hint:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_data_shows_prompts_as_the_model_reads_them(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, [*ROWS, {"question": "no answer", "answer": ""}])
    res = cli("data", "c.toml", "-n", "2", "--json")
    assert res.code == 0, res.stderr
    found = json.loads(res.stdout)
    assert found["tables"] == ["gsm.jsonl: 81 rows; reads question, answer"]
    assert found["notes"][0] == "gsm.jsonl: dropped 1 of 81 rows with an empty reference (the first: gsm.jsonl:81)"
    assert found["examples"] + int(found["notes"][1].split()[1]) == 80
    first = found["prompts"][0]
    question = first["text"].split("<|user|>")[1].removesuffix("<|assistant|>")
    n = int(question.split()[2])
    assert first["text"] == f"<bos><|system|>Answer in boxes.<|user|>What is {n} + {n}?<|assistant|>"
    assert first["reference"] == str(2 * n) and first["where"] == f"gsm.jsonl:{n + 1}"
    assert first["tokens"] == len(first["text"]) - len("<bos><|system|><|user|><|assistant|>") + 4
    assert found["lengths"]["checked"] == found["examples"] and found["held_out"] is None
    text = cli("data", "c.toml", "-n", "1")
    assert text.code == 0 and f"--- reference: {2 * n}" in text.stdout and "Training examples:" in text.stdout


def test_data_errors_are_one_line_exit_2_everywhere(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path)
    bad = (tmp_path / "gsm.jsonl").read_text().splitlines()
    bad[51] = bad[51].replace('", "answer"', '" "answer"')
    (tmp_path / "gsm.jsonl").write_text("\n".join(bad) + "\n")
    for verb in (["data"], ["trace"], ["explain"], []):
        res = cli(*verb, "c.toml")
        one_line_exit_2(res, "gsm.jsonl:52: not JSON (Expecting ',' delimiter")
        assert "PASS" not in res.stdout
    assert not (tmp_path / "logs").exists()  # the run stopped before it wrote anything


def test_a_missing_column_fails_before_the_model_loads(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path, extra="")
    (tmp_path / "c.toml").write_text(CONFIG.replace('prompt_key = "question"', 'prompt_key = "questoin"'))
    for verb in (["data"], ["trace"], []):
        one_line_exit_2(cli(*verb, "c.toml"), "[data] prompt_key 'questoin': no such column in gsm.jsonl "
                        "(columns: question, answer); did you mean 'question'?")
    assert not (tmp_path / "logs").exists()


def test_eval_names_the_bad_line_of_its_data(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path)
    (tmp_path / "eval.jsonl").write_bytes(b'{"prompt": "1+1=", "answer": "2"}\n{"prompt": "\xff", "answer": "3"}\n')
    (tmp_path / "c.toml").write_text(CONFIG + '[eval]\ndata_path = "eval.jsonl"\n')
    one_line_exit_2(cli("eval", "c.toml"), "eval.jsonl:2: not UTF-8 (byte 0xff at byte 13 of the line)")
    (tmp_path / "eval.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2=" "answer": "4"}\n')
    one_line_exit_2(cli("eval", "c.toml"), "eval.jsonl:2: not JSON (Expecting ',' delimiter at column 19)")


def test_data_shows_sft_rows_with_their_target(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rows = [{"chat": [{"role": "user", "content": f"{i}+{i}?"}, {"role": "assistant", "content": str(2 * i)}]}
            for i in range(4)]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "c.toml").write_text('[model]\nmodel = "tiny"\n[backend]\ndevices = "cpu"\n[training]\n'
                                     'trainer = "sft"\nsft_data_path = "chat.jsonl"\n[data]\nmessages_key = "chat"\n')
    res = cli("data", "c.toml", "-n", "2", "--json")
    assert res.code == 0, res.stderr
    found = json.loads(res.stdout)
    assert found["rows"] == 4 and found["path"] == "chat.jsonl"
    assert [(p["where"], p["text"], p["target"]) for p in found["prompts"]] == [
        ("chat.jsonl:1", "<bos><|user|>0+0?<|assistant|>", "0<eos>"),
        ("chat.jsonl:2", "<bos><|user|>1+1?<|assistant|>", "2<eos>")]
