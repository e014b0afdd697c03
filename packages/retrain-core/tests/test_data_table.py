"""`[data] source = "dataset"`: every form a table comes in, the keys that map it, its splits,
and the lazy, seeded walk over it (retrain.data.table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from core_stubs import CharTokenizer

from retrain.data.source import DataError, ExampleSequence, load_examples, notes_of
from retrain.data.split import held_out
from retrain.evaluation.problems import load_problems
from retrain.validation.load import load_config

ROWS = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i:,}"} for i in range(600)]
GSM8K = ["--data-prompt-key", "question", "--data-answer-key", "answer", "--data-answer-pattern", "gsm8k"]


def config(*args: str) -> Any:
    return load_config(None, ["--data-source", "dataset", "--seed", "3", *args], import_plugins=False).config


def pairs(examples: Any) -> set[tuple[str, str]]:
    return {(e.prompt, e.reference) for e in examples}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


EXPECTED = {(r["question"], str(2 * i)) for i, r in enumerate(ROWS)}


def _every_form(root: Path) -> dict[str, str]:
    """The same rows written as each form a [data] path takes."""
    import datasets

    table = pa.Table.from_pylist(ROWS)
    write_jsonl(root / "t.jsonl", ROWS)
    (root / "t.json").write_text(json.dumps(ROWS))
    pq.write_table(table, root / "t.parquet")
    with pa.OSFile(str(root / "t.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    datasets.Dataset.from_list(ROWS).to_csv(str(root / "t.csv"), index=False)
    (root / "shards").mkdir()
    for k in range(3):
        write_jsonl(root / "shards" / f"part-{k}.jsonl", ROWS[k * 200:(k + 1) * 200])
    (root / "folder").mkdir()
    pq.write_table(table, root / "folder" / "train.parquet")
    datasets.Dataset.from_list(ROWS).save_to_disk(str(root / "saved"))
    return {"jsonl": "t.jsonl", "json": "t.json", "parquet": "t.parquet", "arrow": "t.arrow", "csv": "t.csv",
            "glob": "shards/*.jsonl", "folder": "folder", "save_to_disk": "saved"}


def test_every_form_gives_the_same_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for form, path in _every_form(tmp_path).items():
        train = load_examples(config("--data-path", path, *GSM8K))
        held = load_problems(config("--data-path", path, *GSM8K, "--eval-every", "1"))
        assert isinstance(train, ExampleSequence), form
        assert pairs(train) | pairs(held) == EXPECTED and not pairs(train) & pairs(held), form
        assert all(held_out("dataset", e.prompt, 3) for e in held), form


def test_the_walk_is_seeded_lazy_and_resumes_exactly(tmp_path: Path) -> None:
    from retrain.training.prompts import PromptCursor

    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "t.parquet")
    path = str(tmp_path / "t.parquet")
    one = load_examples(config("--data-path", path, *GSM8K))
    assert [e.prompt for e in one] == [e.prompt for e in load_examples(config("--data-path", path, *GSM8K))]
    other = load_examples(load_config(None, ["--data-source", "dataset", "--seed", "4", "--data-path", path, *GSM8K],
                                      import_plugins=False).config)
    assert [e.prompt for e in one][:20] != [e.prompt for e in other][:20]  # the seed orders (and splits) the rows
    kept = {e.prompt for e in one}
    assert [e.prompt for e in one] != [r["question"] for r in ROWS if r["question"] in kept]  # not table order
    assert isinstance(one[10:20], ExampleSequence) and [e.prompt for e in one[10:20]] == [one[i].prompt for i in
                                                                                          range(10, 20)]
    straight = PromptCursor(one, CharTokenizer())  # type: ignore[arg-type]
    walked = [e.prompt for e, _ in straight.take(7)] + [e.prompt for e, _ in straight.take(9)]
    first = PromptCursor(one, CharTokenizer())  # type: ignore[arg-type]
    taken = [e.prompt for e, _ in first.take(7)]
    again = load_examples(config("--data-path", path, *GSM8K))  # a resumed run loads the table anew
    resumed = PromptCursor(again, CharTokenizer(), start=first.index)  # type: ignore[arg-type]
    assert taken + [e.prompt for e, _ in resumed.take(9)] == walked
    assert not isinstance(first.examples, list)  # the cursor keeps the sequence, it does not list it


def test_max_examples_keeps_the_first_of_the_walk(tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "t.parquet")
    path = str(tmp_path / "t.parquet")
    every = load_examples(config("--data-path", path, *GSM8K))
    some = load_examples(config("--data-path", path, *GSM8K, "--max-examples", "5"))
    assert [e.prompt for e in some] == [e.prompt for e in every][:5] and notes_of(some) == notes_of(every)


@pytest.mark.parametrize(("pattern", "answer", "reference"), [
    ("gsm8k", "so 3 + 4 = 7\n#### 1,007", "1007"),
    ("boxed", "first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("last_number", "it costs 12 dollars, or -3.5 after 2,000 days", "2000"),
    (r"Answer: (\w+)", "Work... Answer: seven.", "seven"),
    ("", "  42 ", "42"),
])
def test_answer_patterns(tmp_path: Path, pattern: str, answer: str, reference: str) -> None:
    write_jsonl(tmp_path / "t.jsonl", [{"prompt": f"q{i}", "answer": answer} for i in range(40)])
    got = load_examples(config("--data-path", str(tmp_path / "t.jsonl"), "--data-answer-pattern", pattern))
    assert {e.reference for e in got} == {reference}


def test_template_and_system_prompt_build_the_turns(tmp_path: Path) -> None:
    rows = [{"q": f"{i}+{i}", "unit": "apples", "answer": i * 2} for i in range(40)]
    write_jsonl(tmp_path / "t.jsonl", rows)
    got = load_examples(config("--data-path", str(tmp_path / "t.jsonl"), "--data-prompt-template",
                               "How many {unit} is {q}?", "--data-system-prompt", "Answer in \\boxed{}."))
    ex = next(e for e in got if e.prompt == "How many apples is 3+3?")
    assert ex.reference == "6" and ex.task == "dataset"
    assert ex.messages == [{"role": "system", "content": "Answer in \\boxed{}."},
                           {"role": "user", "content": "How many apples is 3+3?"}]


def test_chat_rows_prompt_with_the_turns_before_the_last_assistant_turn(tmp_path: Path) -> None:
    rows = [{"conv": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "hello"},
                      {"role": "user", "content": f"what is {i} + 1?"},
                      {"role": "assistant", "content": f"It is \\boxed{{{i + 1}}}."}]} for i in range(40)]
    write_jsonl(tmp_path / "chat.jsonl", rows)
    got = load_examples(config("--data-path", str(tmp_path / "chat.jsonl"), "--data-messages-key", "conv",
                               "--data-answer-pattern", "boxed", "--data-system-prompt", "Be brief."))
    ex = next(e for e in got if e.prompt == "what is 3 + 1?")
    assert ex.reference == "4" and ex.completion == "It is \\boxed{4}."
    assert [m["role"] for m in ex.messages or []] == ["system", "user", "assistant", "user"]
    ids = CharTokenizer().encode_prompt("Be brief.\n\nhi 3\n\nhello\n\nwhat is 3 + 1?")
    from retrain.data.chat import encode_example

    assert encode_example(ex, CharTokenizer()) == ids  # type: ignore[arg-type]  # no chat template: turns joined


def test_named_splits_of_a_folder_and_a_saved_dataset_dict(tmp_path: Path) -> None:
    import datasets

    (tmp_path / "splits").mkdir()
    write_jsonl(tmp_path / "splits" / "train.jsonl", ROWS[:500])
    write_jsonl(tmp_path / "splits" / "test.jsonl", ROWS[500:])
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:500]),
                          "test": datasets.Dataset.from_list(ROWS[500:])}).save_to_disk(str(tmp_path / "dict"))
    for path in ("splits", "dict"):
        args = ("--data-path", str(tmp_path / path), *GSM8K, "--data-eval-split", "test")
        train, held = load_examples(config(*args)), load_problems(config(*args, "--eval-every", "1"))
        assert len(train) == 500 and pairs(held) == {(r["question"], str(2 * i + 1000)) for i, r in
                                                     enumerate(ROWS[500:])}, path
        assert [e.prompt for e in held] == [r["question"] for r in ROWS[500:]]  # the eval split in table order
    with pytest.raises(DataError, match=r"no split 'validation' \(splits: train, test\)"):
        load_examples(config("--data-path", str(tmp_path / "dict"), *GSM8K, "--data-split", "validation"))
    with pytest.raises(DataError, match=r"is one split, 'train', not 'test'"):
        load_examples(config("--data-path", str(tmp_path / "splits" / "train.jsonl"), *GSM8K, "--data-split", "test"))


def _prepared_hub_cache(root: Path, name: str, subset: str) -> Path:
    """What `datasets.load_dataset(name, subset)` leaves in its cache, made from local files: the
    parquet builder run under the hub id, its configuration folder named as the hub's are."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    pq.write_table(pa.Table.from_pylist(ROWS[:500]), root / "train.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[500:]), root / "test.parquet")
    cache = root / "datasets-cache"
    builder = Parquet(cache_dir=str(cache), dataset_name=name.split("/")[-1], config_name=subset, repo_id=name,
                      data_files={"train": str(root / "train.parquet"), "test": str(root / "test.parquet")},
                      hash="0123abcd")
    builder.download_and_prepare()
    folder = cache / name.replace("/", "___")
    (made,) = folder.iterdir()
    made.rename(folder / subset)
    return cache


def test_a_hub_id_from_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _prepared_hub_cache(tmp_path, "openai/gsm8k", "main")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    args = ("--data-name", "openai/gsm8k", "--data-subset", "main", *GSM8K, "--data-eval-split", "test")
    assert len(load_examples(config(*args))) == 500
    assert len(load_problems(config(*args, "--eval-every", "1"))) == 100
    with pytest.raises(DataError, match=r"in .*datasets-cache: Couldn't find cache for openai/gsm8k for config "
                                        r"'socratic'.*Available configs in the cache: \['main'\]"):
        load_examples(config("--data-name", "openai/gsm8k", "--data-subset", "socratic", *GSM8K))


def test_a_hub_id_from_a_hub_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository `huggingface-cli download --repo-type dataset` left in the hub cache."""
    repo = tmp_path / "hub" / "datasets--org--gsm"
    snapshot = repo / "snapshots" / "abc123"
    (snapshot / "main").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    pq.write_table(pa.Table.from_pylist(ROWS[:500]), snapshot / "main" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[500:]), snapshot / "main" / "test-00000-of-00001.parquet")
    (snapshot / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n"
                                        "    path: main/train-*\n  - split: test\n    path: main/test-*\n---\n")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    got = load_examples(config("--data-name", "org/gsm", "--data-subset", "main", "--data-split", "test", *GSM8K,
                               "--data-eval-split", "train"))
    assert pairs(got) == {(r["question"], str(2 * (i + 500))) for i, r in enumerate(ROWS[500:])}


def test_a_hub_id_that_is_not_cached_fails_at_once_naming_both_caches(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "ds"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # offline or not, the network is never asked
    with pytest.raises(DataError, match=rf"'openai/gsm8k' is not in this machine's Hugging Face cache \(looked in "
                                        rf"{tmp_path / 'ds' / 'openai___gsm8k'} and "
                                        rf"{tmp_path / 'hub' / 'datasets--openai--gsm8k'}\)"):
        load_examples(config("--data-name", "openai/gsm8k", *GSM8K))


def test_empty_references_are_dropped_and_counted_once(tmp_path: Path) -> None:
    rows = [*ROWS[:100], {"question": "no answer", "answer": ""}, {"question": "no marker", "answer": "7"},
            {"question": "", "answer": "#### 1"}, {"question": "null answer", "answer": None}]
    write_jsonl(tmp_path / "t.jsonl", rows)
    got = load_examples(config("--data-path", str(tmp_path / "t.jsonl"), *GSM8K))
    path = tmp_path / "t.jsonl"
    assert notes_of(got)[:3] == (
        f"{path}: dropped 2 of 104 rows with an empty reference (the first: {path}:101)",
        f"{path}: dropped 1 of 104 rows with an answer in which answer_pattern 'gsm8k' finds no reference "
        f"(the first: {path}:102)",
        f"{path}: dropped 1 of 104 rows with an empty prompt (the first: {path}:103)")
    assert not {"no answer", "no marker", "", "null answer"} & {e.prompt for e in got}


def test_a_table_of_no_usable_rows_says_why(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "t.jsonl", [{"question": f"q{i}", "answer": "no marker"} for i in range(5)])
    with pytest.raises(DataError, match=r"gives no training examples: .*dropped 5 of 5 rows with an answer in "
                                        r"which answer_pattern 'gsm8k' finds no reference"):
        load_examples(config("--data-path", str(tmp_path / "t.jsonl"), *GSM8K))


def test_eval_data_path_takes_every_form_and_the_data_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    pq.write_table(pa.Table.from_pylist(ROWS[:30]), tmp_path / "eval.parquet")
    got = load_problems(load_config(None, ["--data-source", "arithmetic", "--eval-every", "1", "--eval-data-path",
                                           "eval.parquet", *GSM8K], import_plugins=False).config)
    assert [(e.prompt, e.reference, e.task) for e in got] == [(r["question"], str(2 * i), "eval")
                                                              for i, r in enumerate(ROWS[:30])]


def test_a_missing_column_names_the_columns_and_the_closest(tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(ROWS[:5]), tmp_path / "t.parquet")
    path = str(tmp_path / "t.parquet")
    for args, message in [
        (("--data-prompt-key", "questoin", "--data-answer-key", "answer"),
         r"\[data\] prompt_key 'questoin': no such column in .*t.parquet \(columns: question, answer\); did you "
         r"mean 'question'\?"),
        (("--data-prompt-key", "question", "--data-answer-key", "answers"),
         r"\[data\] answer_key 'answers': no such column .*did you mean 'answer'\?"),
        (("--data-prompt-template", "Q: {quest}",), r"placeholder 'quest': no such column .*did you mean 'question'"),
        (("--data-prompt-key", "question", "--data-messages-key", "messages"), r"is not read with messages_key"),
    ]:
        with pytest.raises(Exception, match=message):
            load_examples(config("--data-path", path, *args))
    pq.write_table(pa.table({"question": ["q"], "solution": ["1"]}), tmp_path / "s.parquet")
    with pytest.raises(DataError, match=r"answer_key: .*s.parquet has no 'reference' or 'answer' column \(columns: "
                                        r"question, solution\)") as caught:
        load_examples(config("--data-path", str(tmp_path / "s.parquet"), "--data-prompt-key", "question"))
    assert caught.value.hint == 'answer_key = "solution"'


def test_prompts_longer_than_max_prompt_tokens_are_dropped_where_the_walk_meets_them(tmp_path: Path) -> None:
    from retrain.training.prompts import PromptCursor

    rows = [{"prompt": f"{i:02d}" + "x" * (3 if i % 3 else 50), "answer": str(i)} for i in range(30)]
    write_jsonl(tmp_path / "t.jsonl", rows)
    examples = load_examples(config("--data-path", str(tmp_path / "t.jsonl")))
    long_rows = {i for i in range(len(examples)) if len(examples[i].prompt) > 10}
    said: list[str] = []
    cursor = PromptCursor(examples, CharTokenizer(), max_prompt_tokens=10, note=said.append)  # type: ignore[arg-type]
    taken = cursor.take(40)
    assert all(len(ids) <= 10 for _, ids in taken) and cursor.dropped_long == long_rows
    walked = [p % len(examples) for p in range(cursor.index)]
    assert [examples[p].prompt for p in walked if p not in long_rows] == [e.prompt for e, _ in taken]
    assert len(said) == 1 and "(the first: 52 tokens)" in said[0]

    def cursor_at(start: int = 0) -> PromptCursor:
        return PromptCursor(examples, CharTokenizer(), start=start, max_prompt_tokens=10)  # type: ignore[arg-type]

    straight, first = cursor_at(), cursor_at()
    whole = [e.prompt for e, _ in straight.take(7) + straight.take(9)]
    head = [e.prompt for e, _ in first.take(7)]
    assert head + [e.prompt for e, _ in cursor_at(first.index).take(9)] == whole  # resume skips the same rows
    with pytest.raises(DataError, match="every prompt is longer"):
        PromptCursor(examples, CharTokenizer(), max_prompt_tokens=2).take(1)  # type: ignore[arg-type]


def test_the_held_out_hash_split_does_not_depend_on_evaluation_or_order(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", ROWS)
    write_jsonl(tmp_path / "b.jsonl", list(reversed(ROWS)))
    a = load_problems(config("--data-path", str(tmp_path / "a.jsonl"), *GSM8K, "--eval-every", "1"))
    b = load_problems(config("--data-path", str(tmp_path / "b.jsonl"), *GSM8K, "--eval-every", "1"))
    assert pairs(a) == pairs(b) and 0 < len(a) < 60
