"""A real vLLM (the CPU build, tests/vllm_server.py) as a distillation teacher and as a reward
model's server, against retrain's own sides:

- vLLM's `prompt_logprobs` of SmolLM2 tokens, read by retrain's server teacher, equal a direct
  fp32 forward within 1e-3 and `retrain serve`'s within 1e-3 (retrain serve's equal the forward
  within 1e-4), and vLLM tokenizes the probe as the student does;
- vLLM's `/classify` of a tiny random sequence classifier (`--runner pooling`, raw logits) equals
  the local reward model's within 1e-4, and a reward-model run scored by it trains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from serving import serve_in_process
from tiny_run import Messages, tiny_classifier, write_tiny_run
from vllm_server import API_KEY, smollm2_folder, vllm_python

from retrain.io.log import read_jsonl
from retrain.teacher.protocol import ScoreRow
from retrain.teacher.server import ServerTeacher

pytestmark = pytest.mark.slow

TEXTS = ["What is 3 + 4? The answer is \\boxed{7}.", "Solve: 12 + 30. Then write nothing after \\boxed{42}",
         "The quick brown fox jumps over the lazy dog."]


def rows_of(tokenizer: Any) -> list[ScoreRow]:
    out = []
    for text in TEXTS:
        ids = [int(i) for i in tokenizer.encode(text, add_special_tokens=True)]
        out.append(ScoreRow(ids, max(1, len(ids) // 3)))
    return out


def direct(folder: Path, rows: list[ScoreRow]) -> list[list[float]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for row in rows:
            lps = torch.log_softmax(model(input_ids=torch.tensor([row.tokens])).logits[0].float(), dim=-1)
            out.append([float(lps[j - 1, row.tokens[j]]) for j in range(row.start, len(row.tokens))])
    return out


def gap(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def scored(url: str, model: str, tokenizer: Any, rows: list[ScoreRow], monkeypatch: pytest.MonkeyPatch,
           key: str) -> list[list[float]]:
    monkeypatch.setenv("RETRAIN_TEST_TEACHER_KEY", key)
    teacher = ServerTeacher(url, model, api_key_env="RETRAIN_TEST_TEACHER_KEY", batch_size=2)
    try:
        teacher.check_tokenizer(tokenizer, "smollm2")
        return teacher.score(rows)
    finally:
        teacher.close()


def test_vllm_and_retrain_serve_score_given_tokens_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_serve
    from transformers import AutoTokenizer

    folder = smollm2_folder()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    rows = rows_of(tokenizer)
    want = direct(folder, rows)
    # a server of its own, without runtime LoRA: vLLM 0.32's CPU build fails a prompt_logprobs
    # request when LoRA is enabled (its LoRA logits op gets the prompt's hidden states), and the
    # session's server, which the other vLLM tests share, is served with it
    server = vllm_serve.start(vllm_python(), tmp_path / "vllm-teacher", folder, api_key=API_KEY, lora=False)
    try:
        from_vllm = scored(server.url + "/v1", str(server.model), tokenizer, rows, monkeypatch, API_KEY)
    finally:
        server.stop()
    config = f'[model]\nmodel = "{folder}"\n[backend]\ndevices = "cpu"\n[training]\nseed = 0\n'
    with serve_in_process(tmp_path, config, api_key="k") as url:
        from_retrain = scored(url, str(folder), tokenizer, rows, monkeypatch, "k")
    assert gap(from_retrain, want) < 1e-4, gap(from_retrain, want)
    assert gap(from_vllm, want) < 1e-3, gap(from_vllm, want)
    assert gap(from_vllm, from_retrain) < 1e-3


def test_vllm_classify_is_the_local_reward_model_and_scores_a_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm_serve

    from retrain.backends.local.reward_model import LocalClassifier
    from retrain.rewards.model.server import ClassifierServer
    from retrain.training.trainers import train
    from retrain.validation.load import load_config

    rm = tiny_classifier(tmp_path / "rm")
    server = vllm_serve.start(vllm_python(), tmp_path / "vllm-rm", rm, api_key=API_KEY, classifier=True)
    try:
        monkeypatch.setenv("RETRAIN_TEST_RM_KEY", API_KEY)
        texts = ["3+4=\n\\boxed{7}", "9+9=\n18 is the sum", "1+1=\n"]
        remote = ClassifierServer(server.url, str(rm), api_key_env="RETRAIN_TEST_RM_KEY", timeout_s=120).classify(texts)
        cfg = tmp_path / "local.toml"
        cfg.write_text(f'[reward]\ntype = "model"\nmodel = "{rm}"\n')
        local = LocalClassifier(load_config(cfg, [], import_plugins=False).config).classify(texts)
        assert gap(remote, local) < 1e-4, (remote, local)
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        run = write_tiny_run(tmp_path, "served-rm", training={"max_steps": 2})
        run.write_text(run.read_text().replace('type = "custom"\ncustom_module = "toy_reward"',
                                               f'type = "model"\nmodel = "{rm}"\nmodel_url = "{server.url}"\n'
                                               'model_api_key_env = "RETRAIN_TEST_RM_KEY"\ntimeout_s = 120'))
        train(load_config(run, [], import_plugins=False).config, Messages())
        rows = read_jsonl(tmp_path / "served-rm" / "logs" / "metrics.jsonl")
        assert len(rows) == 2 and all(r["reward_errors"] == 0 and r["reward_model/requests"] >= 1 for r in rows)
    finally:
        server.stop()
