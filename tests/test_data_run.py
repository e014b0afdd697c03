"""Tables train with a config only, through the real `retrain` command (in this process, the
fast tier): a GSM8K-shaped parquet and JSONL train the RL loop and evaluate on their hash
held-out rows; a chat (`messages`) table trains SFT with its last assistant turn as the target;
`[data] chat_template_kwargs` reach a Hugging Face chat template."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tiny_run import GRADED_REWARD, TRAINING, retrain

from retrain.io.log import read_jsonl


def write_config(root: Path, training: dict[str, object], data: dict[str, object], extra: str = "") -> Path:
    """A tiny run on `data` (the [data] table), logging to `root/run/logs`, with a graded toy reward."""
    (root / "toy_reward.py").write_text(GRADED_REWARD)

    def table(values: dict[str, object]) -> str:
        return "\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items())

    cfg = root / "run.toml"
    cfg.write_text(f"""
[model]
model = "tiny"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{root / 'run' / 'adapters'}"
[training]
{table({**TRAINING, **training})}
[data]
{table(data)}
[reward]
type = "custom"
custom_module = "toy_reward"
[logging]
log_dir = "{root / 'run' / 'logs'}"
{extra}
""")
    return cfg


ROWS = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i}"}
        for i in range(120)]


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_gsm8k_shaped_table_trains_with_a_config_only(tmp_path: Path, form: str) -> None:
    path = tmp_path / f"gsm8k.{form}"
    if form == "parquet":
        pq.write_table(pa.Table.from_pylist(ROWS), path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cfg = write_config(tmp_path, {}, {"source": "dataset", "path": path.name, "prompt_key": "question",
                                      "answer_key": "answer", "answer_pattern": "gsm8k"},
                       "[eval]\nbefore_train = true\nmax_examples = 2")
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr + res.stdout
    logs = tmp_path / "run" / "logs"
    assert len(read_jsonl(logs / "metrics.jsonl")) == 2
    questions = {r["question"] for r in ROWS}
    prompts = {row["prompt"] for row in read_jsonl(logs / "emergence" / "generations.jsonl")}
    assert prompts and prompts <= questions
    evaluated = [row for row in read_jsonl(logs / "eval.jsonl")]
    assert evaluated and evaluated[0]["eval/examples"] == 2
    assert "usable rows held out for evaluation" in res.stdout + res.stderr


def test_a_chat_table_trains_sft_on_its_last_assistant_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"conversations": [{"role": "user", "content": f"{a}+{a}?"}, {"role": "assistant", "content": "Sure."},
                               {"role": "user", "content": "The sum?"},
                               {"role": "assistant", "content": str(2 * a)}]} for a in range(32)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "chat.parquet")
    cfg = write_config(tmp_path, {"trainer": "sft", "sft_data_path": "chat.parquet", "max_steps": 3, "batch_size": 4,
                                  "sft_max_tokens": 128},
                       {"messages_key": "conversations", "system_prompt": "Add."})
    res = retrain(cfg)
    assert res.returncode == 0, res.stderr + res.stdout
    rows_logged = read_jsonl(tmp_path / "run" / "logs" / "metrics.jsonl")
    assert len(rows_logged) == 3 and all(r["loss"] > 0 for r in rows_logged)

    from retrain.backends.local.prompt_tokenizer import load
    from retrain.training.sft.data import encode_row, load_sft_data
    from retrain.validation.load import load_config

    monkeypatch.chdir(tmp_path)
    config = load_config(str(cfg), []).config
    tokenizer = load(config)
    data = load_sft_data(config)
    assert len(data.rows) == 32 and data.rows[0].where == "chat.parquet row 1"
    encoded = encode_row(data.rows[5], tokenizer, data.path)
    target = [t for t, on in zip(encoded.tokens, encoded.target, strict=True) if on]
    assert tokenizer.hf.decode(target) == "10<eos>"  # the last assistant turn and EOS, nothing before it
    assert tokenizer.hf.decode(encoded.tokens[:encoded.target.index(True)]) == \
        "<bos><|system|>Add.<|user|>5+5?<|assistant|>Sure.<eos><|user|>The sum?<|assistant|>"


def test_chat_template_kwargs_reach_the_template() -> None:
    from transformers import AutoTokenizer

    from retrain.backends.tokenizer import HFTokenizer
    from retrain.data.chat import PromptEncoder
    from retrain.models.tiny import ASSETS
    from retrain.types import Example

    hf = AutoTokenizer.from_pretrained(str(ASSETS), local_files_only=True)
    hf.chat_template = ("{% for m in messages %}{{ '<|' + m['role'] + '|>' + m['content'] }}{% endfor %}"
                        "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% if enable_thinking %}{{ 'think' }}"
                        "{% endif %}{% endif %}")
    tokenizer = HFTokenizer(hf)
    example = Example(prompt="2+2", messages=[{"role": "user", "content": "2+2"}])
    plain = hf.decode(PromptEncoder()(example, tokenizer))
    thinking = hf.decode(PromptEncoder({"enable_thinking": True})(example, tokenizer))
    assert plain == "<|user|>2+2<|assistant|>" and thinking == "<|user|>2+2<|assistant|>think"
    bare = Example(prompt="3+3")  # a prompt without turns reaches the template as one user turn
    assert hf.decode(PromptEncoder({"enable_thinking": True})(bare, tokenizer)) == "<|user|>3+3<|assistant|>think"
