"""What a run learns and how it is scored: `[data]`, `[reward]`, `[environment]` and `[eval]`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from retrain.config.sections.base import F, JsonTable, Section


class DataConfig(Section):
    _prefix: ClassVar[str] = "data_"
    source: Annotated[
        str,
        F(
            "Prompt source: dataset (any table: [data] path or name, mapped by the keys below), math (MATH, "
            "local path or hub), arithmetic (generated, offline), an entry point, or a dotted path. Ignored "
            "when [environment] provider is set."
        ),
    ] = "math"
    path: Annotated[
        str, F("Local data. dataset: a JSONL, JSON, CSV, parquet or Arrow file, a folder or glob of them, or a "
               "save_to_disk folder. math: a local copy (JSONL with problem/solution or prompt/reference rows), "
               "used instead of the hub.")
    ] = ""
    name: Annotated[
        str, F("dataset: a hub id (e.g. openai/gsm8k) read from this machine's Hugging Face cache, never "
               "downloaded; instead of path.")
    ] = ""
    subset: Annotated[str, F("dataset: the hub id's configuration (e.g. main for openai/gsm8k); empty = its only one.")] = ""
    split: Annotated[
        str, F("dataset: the split to train on (a file or glob is one split, train; a folder's file names and a "
               "saved or cached dataset name theirs).")
    ] = "train"
    eval_split: Annotated[
        str, F("dataset: the split to evaluate on; empty = a held-out twentieth of split, chosen by a hash of each "
               "prompt (training never sees it).")
    ] = ""
    prompt_key: Annotated[str, F("Column of the prompt text (dataset, [eval] data_path, SFT tables).")] = "prompt"
    answer_key: Annotated[
        str, F("Column of the reference answer; empty = reference, else answer (messages rows without either: "
               "the last assistant turn).")
    ] = ""
    messages_key: Annotated[
        str, F("Column of chat rows (a list of {role, content}): the prompt is every turn before the last "
               "assistant turn, which is the SFT target.")
    ] = ""
    prompt_template: Annotated[
        str, F("The user turn built from a row, with {column} placeholders (e.g. \"{question}\\nAnswer:\"); "
               "empty = the prompt_key column as it is.")
    ] = ""
    system_prompt: Annotated[str, F("A system turn put before each prompt (unless a messages row has one).")] = ""
    answer_pattern: Annotated[
        str, F("How the reference is taken from the answer column: a preset (gsm8k: the text after ####; boxed: "
               "the last \\boxed{}; last_number) or a regular expression (its first group, else its match); "
               "empty = the column as it is.")
    ] = ""
    chat_template_kwargs: Annotated[
        JsonTable, F("Arguments passed to the tokenizer's chat template, e.g. {enable_thinking = false}.")
    ] = msgspec.field(default_factory=dict)
    max_prompt_tokens: Annotated[
        int, F("Drop prompts longer than this many tokens (as the model sees them), counted and reported; "
               "0 = keep all.", ge=0)
    ] = 0
    difficulty: Annotated[
        int, F("arithmetic: digits per operand (1 = single-digit addition, 100 problems).", ge=1, le=6)
    ] = 1


class RewardConfig(Section):
    _prefix: ClassVar[str] = "reward_"
    type: Annotated[
        str, F("Reward: match, strict, partial, math, judge, model (a reward model), custom, or a dotted path.")
    ] = "match"
    judge_model: Annotated[str, F("Judge model for type = judge (default gpt-4o-mini).")] = ""
    judge_base_url: Annotated[
        str, F("OpenAI-compatible endpoint of the judge (http(s)://host[:port]/v1); empty = $OPENAI_BASE_URL, "
               "else https://api.openai.com/v1.")
    ] = ""
    judge_api_key_env: Annotated[
        str, F("Environment variable that holds the judge's API key (never the key itself); an unset "
               "variable sends no key, which only a server on this machine accepts.")
    ] = "OPENAI_API_KEY"
    judge_client: Annotated[
        Literal["http", "verifiers"],
        F("http: retrain's own client, verdict 1 when the reply contains 'yes'; verifiers: the "
          "verifiers package's reference-answer judge and its stricter verdict parsing."),
    ] = "http"
    judge_concurrency: Annotated[
        int, F("Judge requests in flight at once (type = model with model_url: reward-model requests).", ge=1)
    ] = 8
    judge_retries: Annotated[
        int, F("Retries of a judge request (type = model with model_url: a reward-model request) that timed out, "
               "could not connect or got 408/409/429/5xx, with exponential backoff (0.5 s, 1 s, 2 s, ...).", ge=0)
    ] = 2
    model: Annotated[
        str, F("type = model: a sequence-classification checkpoint (AutoModelForSequenceClassification: a "
               "folder or a hub id) scored on this machine, or, with model_url set, the name its server serves.")
    ] = ""
    model_url: Annotated[
        str, F("type = model: the root of a server that classifies texts (http(s)://host[:port]): retrain posts "
               "to {model_url}/classify as vLLM's classification endpoint takes it. Empty = load model here.")
    ] = ""
    model_api_key_env: Annotated[
        str, F("Environment variable that holds the reward-model server's API key (never the key itself); empty "
               "or unset sends no key.")
    ] = ""
    model_batch_size: Annotated[
        int, F("type = model: texts per forward pass (local) or per request (model_url).", ge=1)
    ] = 16
    model_template: Annotated[
        str, F("type = model: the text the classifier reads, {prompt} and {response} filled in (write a chat "
               "reward model's own markup around them).")
    ] = "{prompt}\n{response}"
    model_score: Annotated[
        Literal["sigmoid", "logit", "softmax"],
        F("type = model: the reward from the classifier's logits: sigmoid of a one-label head's logit (in (0, 1); "
          "above 0.5 counts as correct), that logit as it is, or softmax: the probability of label model_label."),
    ] = "sigmoid"
    model_label: Annotated[
        int, F("model_score = softmax: the label whose probability is the reward; -1 = the last.", ge=-1)
    ] = -1
    model_device: Annotated[
        Literal["cpu", "student"], F("type = model, loaded here: on the CPU, or on the first [backend] device.")
    ] = "cpu"
    custom_module: Annotated[str, F("Module of the custom reward (type = custom).")] = ""
    custom_function: Annotated[str, F("Function of the custom reward: fn(response, reference).")] = "score"
    timeout_s: Annotated[
        float, F("Per-item reward deadline in seconds; a reward that overruns (or raises) scores 0 and is counted. "
                 "type = judge: the deadline of each judge request as a whole, from connecting to the reply's last "
                 "byte (each retry gets its own).", gt=0)
    ] = 10.0
    max_error_share: Annotated[
        float, F("Stop the run when at least this share of a step's completions fail to score (the reward raises, "
                 "overruns or returns no number) for max_error_steps steps in a row. The default, half, stops a "
                 "reward that fails on most answers, not only on all; 1.0 stops only when every one fails.",
                 gt=0, le=1)
    ] = 0.5
    max_error_steps: Annotated[
        int, F("Steps in a row at max_error_share that stop the run (a checkpoint is saved, exit status 3); "
               "0 = never stop. Above 0, a run too short to reach it whose reward scored none of its "
               "completions stops at its last step the same way.", ge=0)
    ] = 3


class EnvironmentConfig(Section):
    _prefix: ClassVar[str] = "environment_"
    provider: Annotated[str, F("Environment provider: '' (none), verifiers, openenv, or an entry point.")] = ""
    id: Annotated[str, F("Environment id (verifiers) or URL (openenv: http(s):// or ws(s)://).")] = ""
    args: Annotated[
        JsonTable, F("Environment arguments: a table, or a JSON object string.")
    ] = msgspec.field(default_factory=dict)
    max_turns: Annotated[int, F("Override the environment's max turns; -1 = no override.", ge=-1)] = -1
    max_episode_tokens: Annotated[
        int, F("verifiers multi-turn: an episode stops after the turn that brings its tokens (prompts and "
               "replies) to this many; 0 = no limit.", ge=0)
    ] = 0
    auto_install: Annotated[bool, F("Install a missing verifiers environment package.")] = False
    rollout_env_workers: Annotated[int, F("Concurrent environment workers.", ge=1)] = 1
    rollout_buffer_size: Annotated[int, F("Rollout buffer; 0 = group size.", ge=0)] = 0


class EvalConfig(Section):
    _prefix: ClassVar[str] = "eval_"
    every: Annotated[
        int, F("Evaluate on held-out problems after every N RL steps; 0 = no periodic evaluation.", ge=0)
    ] = 0
    before_train: Annotated[
        bool, F("Evaluate the starting policy (after any SFT warmup) before the first RL step, as step 0.")
    ] = False
    at_end: Annotated[
        bool | None,
        F("Evaluate the final policy after the last step; unset = true when every > 0. "
          "Set alone it is the only evaluation."),
    ] = None
    k: Annotated[int, F("The k of pass@k and maj@k.", ge=1)] = 1
    n: Annotated[
        int, F("Samples drawn per problem, at least k; pass@1 and pass@k are estimated from them without "
               "bias. 0 = k.", ge=0)
    ] = 0
    temperature: Annotated[
        float, F("Sampling temperature; -1 = 0 (greedy) when one sample per problem is drawn, else "
                 "[training] temperature.", ge=-1)
    ] = -1.0
    top_p: Annotated[float, F("Nucleus sampling mass; 0 = [training] top_p.", ge=0, le=1)] = 0.0
    max_tokens: Annotated[int, F("Maximum new tokens per completion; 0 = [training] max_tokens.", ge=0)] = 0
    max_examples: Annotated[int, F("Evaluate at most this many problems (the first ones); 0 = all.", ge=0)] = 0
    pass_threshold: Annotated[float, F("A sample passes when its reward is at least this.")] = 1.0
    data_path: Annotated[
        str,
        F("Problems to evaluate on: any table [data] path takes (prompt/reference rows, or columns mapped by "
          "[data]'s keys); empty = the held-out side of the [data] source (arithmetic, math and dataset have one)."),
    ] = ""
