"""Bad data names its culprit, and nothing is dropped without a count: a malformed line or a
byte that is not UTF-8 is a `DataError` naming `file:line` in every reader (the `dataset`
source, `[eval] data_path`, the `math` source's local copy, SFT data, the preflight), and rows
that give nothing are counted and said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from retrain.data.source import DataError, load_examples, notes_of
from retrain.evaluation.problems import load_problems
from retrain.validation.data import check_data_files
from retrain.validation.load import load_config

GOOD = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(60)]


def lines_with(line_52: bytes) -> bytes:
    """60 rows whose 52nd line is `line_52`."""
    lines = [json.dumps(r).encode() for r in GOOD]
    lines[51] = line_52
    return b"\n".join(lines) + b"\n"


MALFORMED = b'{"prompt": "51+1=", "answer": "52" "note": 1}'  # a missing comma before column 36
NOT_UTF8 = b'{"prompt": "51+1=", "answer": "5\xff2"}'


def dataset_config(path: Path, *more: str) -> Any:
    return load_config(None, ["--data-source", "dataset", "--data-path", str(path), *more],
                       import_plugins=False).config


@pytest.mark.parametrize(("line", "message"), [
    (MALFORMED, r"t.jsonl:52: not JSON \(Expecting ',' delimiter at column 36\)"),
    (NOT_UTF8, r"t.jsonl:52: not UTF-8 \(byte 0xff at byte 33 of the line\)"),
    (b"42", r"t.jsonl:52: not a JSON object \(42\)"),
])
def test_the_dataset_source_names_file_and_line(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_with(line))
    for read in (load_examples, check_data_files):
        with pytest.raises(DataError, match=message):
            read(dataset_config(path))


@pytest.mark.parametrize(("line", "message"), [
    (MALFORMED, r"eval.jsonl:52: not JSON"),
    (NOT_UTF8, r"eval.jsonl:52: not UTF-8"),
])
def test_eval_data_path_names_file_and_line(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_bytes(lines_with(line))
    config = load_config(None, ["--data-source", "arithmetic", "--eval-every", "1", "--eval-data-path", str(path)],
                         import_plugins=False).config
    for read in (load_problems, check_data_files):
        with pytest.raises(DataError, match=message):
            read(config)


@pytest.mark.parametrize(("line", "message"), [
    (MALFORMED, r"t.jsonl:52: not JSON \(Expecting ',' delimiter at column 36\)"),
    (NOT_UTF8, r"t.jsonl:52: not UTF-8"),
])
def test_the_math_sources_local_copy_names_file_and_line(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_with(line))
    config = load_config(None, ["--data-source", "math", "--data-path", str(path)], import_plugins=False).config
    for read in (load_examples, check_data_files):
        with pytest.raises(DataError, match=message):
            read(config)


def test_the_math_sources_local_copy_counts_what_it_drops(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [json.dumps({"problem": f"p{i}", "solution": f"so \\boxed{{{i}}}"}) for i in range(40)]
    rows += ["42", "null", json.dumps({"question": "other keys"}), json.dumps({"prompt": "no reference"}),
             json.dumps({"problem": "unboxed", "solution": "7"})]
    path.write_text("\n".join(rows) + "\n")
    got = load_examples(load_config(None, ["--data-source", "math", "--data-path", str(path)],
                                    import_plugins=False).config)
    assert notes_of(got) == (
        f"[data] path {str(path)!r}: dropped 2 of 45 rows with a value that is not a JSON object (the first: {path}:41)",
        f"[data] path {str(path)!r}: dropped 1 of 45 rows with neither problem/solution nor prompt keys "
        f"(the first: {path}:43)",
        f"[data] path {str(path)!r}: dropped 1 of 45 rows with an empty reference (the first: {path}:44)",
        f"[data] path {str(path)!r}: dropped 1 of 45 rows with a solution without a \\boxed{{}} answer "
        f"(the first: {path}:45)")
    assert len(got) + len(load_problems(load_config(None, ["--data-source", "math", "--data-path", str(path),
                                                           "--eval-every", "1"], import_plugins=False).config)) == 40


def test_null_lines_and_rows_of_other_keys_are_counted_by_the_dataset_source(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_with(b"null").replace(json.dumps(GOOD[9]).encode(), b'{"other": 1}'))
    got = load_examples(dataset_config(path, "--data-eval-split", ""))
    assert notes_of(got)[0] == (f"{path}: dropped 2 of 60 rows with none of prompt, answer (a null line, or other "
                                f"keys) (the first: {path}:10)")


def test_other_formats_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("prompt,answer\n1+1=,2\n2+2=,4,extra\n")
    with pytest.raises(DataError, match=r"t.csv:3: not CSV \(.*Expected 2 fields in line 3, saw 3"):
        load_examples(dataset_config(tmp_path / "t.csv"))
    (tmp_path / "t.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"t.parquet: cannot be read as parquet \(ArrowInvalid: .*magic bytes"):
        load_examples(dataset_config(tmp_path / "t.parquet"))
    (tmp_path / "t.json").write_text('[{"prompt": "1+1=", "answer": "2"},\n {"prompt": "2+2=" "answer": "4"}]')
    with pytest.raises(DataError, match=r"t.json:2: not JSON \(Expecting ',' delimiter at column 20\)"):
        load_examples(dataset_config(tmp_path / "t.json"))
    (tmp_path / "t.txt").write_text("prompt\n")
    with pytest.raises(DataError, match=r"t.txt is not a data file retrain reads"):
        load_examples(dataset_config(tmp_path / "t.txt"))
    with pytest.raises(DataError, match=r"'nothing/\*.parquet' matches no file"):
        load_examples(dataset_config(Path("nothing/*.parquet")))
    with pytest.raises(DataError, match=r"does not exist"):
        load_examples(dataset_config(tmp_path / "absent.parquet"))


def test_sft_data_names_file_and_line(tmp_path: Path) -> None:
    from retrain.training.sft.data import read_sft_data
    from retrain.training.sft.records import SftDataError

    path = tmp_path / "sft.jsonl"
    path.write_bytes(b'{"prompt": "a", "completion": "b"}\n{"prompt": "\xff", "completion": "b"}\n')
    with pytest.raises(SftDataError, match=r"sft.jsonl:2: not UTF-8"):
        read_sft_data(str(path))
    path.write_bytes(b'{"prompt": "a", "completion": "b"}\n{"prompt": "a" "completion": "b"}\n')
    with pytest.raises(SftDataError, match=r"sft.jsonl:2: not JSON"):
        read_sft_data(str(path))


def test_sft_data_of_several_files_is_refused_as_not_built(tmp_path: Path) -> None:
    from retrain.training.sft.data import read_sft_data
    from retrain.training.sft.records import SftDataError

    for given in (str(tmp_path), str(tmp_path / "*.jsonl")):
        with pytest.raises(SftDataError, match=r"a folder or glob as SFT data is not built yet"):
            read_sft_data(given)
