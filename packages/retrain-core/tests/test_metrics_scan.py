import json

import pytest

from retrain.metrics.scan import (
    iter_jsonl_objects,
    last_row,
    number,
    read_tail,
    scan_metrics_file,
)


def write_rows(path, rows, tail=b""):
    with open(path, "wb") as f:
        for row in rows:
            f.write(json.dumps(row).encode() + b"\n")
        f.write(tail)


def test_number_excludes_bools_and_non_finite():
    assert number(3) == 3.0 and number(2.5) == 2.5
    for value in (True, False, None, "1", float("nan"), float("inf"), [1]):
        assert number(value) is None


def test_iter_skips_blank_malformed_and_non_object_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 0}\n\n   \nnot json\n[1, 2]\n{"step": 1}\n{"step": 2, "lo')
    assert [r["step"] for r in iter_jsonl_objects(path)] == [0, 1]
    assert list(iter_jsonl_objects(tmp_path / "missing.jsonl")) == []


@pytest.mark.parametrize("block", [7, 64, 1 << 16])
def test_read_tail_returns_newest_rows_in_order_across_blocks(tmp_path, block):
    path = tmp_path / "m.jsonl"
    write_rows(path, [{"step": i, "pad": "x" * (i % 5)} for i in range(50)])
    tail = read_tail(path, 5, block=block)
    assert [r["step"] for r in tail.rows] == [45, 46, 47, 48, 49]
    assert not tail.whole_file
    assert tail.size == path.stat().st_size and tail.mtime == pytest.approx(path.stat().st_mtime)


@pytest.mark.parametrize("block", [5, 1 << 16])
def test_read_tail_ignores_torn_last_line_and_garbage(tmp_path, block):
    path = tmp_path / "m.jsonl"
    write_rows(path, [{"step": 0}, {"step": 1}], tail=b'garbage\n{"step": 2, "loss": 0.')
    tail = read_tail(path, 16, block=block)
    assert [r["step"] for r in tail.rows] == [0, 1]
    assert tail.whole_file
    assert last_row(path) == {"step": 1}


def test_read_tail_accepts_an_unterminated_but_complete_last_row(tmp_path):
    path = tmp_path / "m.jsonl"
    write_rows(path, [{"step": 0}], tail=b'{"step": 1}')
    assert last_row(path) == {"step": 1}


def test_read_tail_whole_file_only_when_everything_was_read(tmp_path):
    path = tmp_path / "m.jsonl"
    write_rows(path, [{"step": i} for i in range(3)])
    assert read_tail(path, 3).whole_file
    assert read_tail(path, 10).whole_file
    assert not read_tail(path, 2).whole_file


def test_read_tail_empty_and_missing_files(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"")
    assert read_tail(path).rows == [] and read_tail(path).whole_file
    missing = read_tail(tmp_path / "nope.jsonl")
    assert missing.rows == [] and missing.mtime is None
    assert last_row(tmp_path / "nope.jsonl") is None


def test_read_tail_reads_a_bounded_amount(tmp_path):
    path = tmp_path / "m.jsonl"
    write_rows(path, [{"step": 0}], tail=b"x" * 100_000)
    tail = read_tail(path, 4, block=1024, max_bytes=8192)
    assert tail.rows == [] and not tail.whole_file


def test_read_tail_does_not_read_the_whole_history(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    write_rows(path, [{"step": i, "pad": "y" * 200} for i in range(5000)])
    seen = []

    class CountingFile:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def read(self, n=-1):
            data = self.f.read(n)
            seen.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, m="r", *a, **k: CountingFile(real_open(p, m, *a, **k)))
    tail = read_tail(path, 16, block=4096)
    assert [r["step"] for r in tail.rows][-1] == 4999
    assert sum(seen) < 3 * 4096 < path.stat().st_size


def test_scan_metrics_file_aggregates_in_one_pass(tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [
        {"step": 0, "loss": 1.0, "correct_rate": 0.1, "step_time_s": 2.0, "process_max_rss_mb": 10},
        {"step": 1, "loss": float("nan"), "correct_rate": 0.3, "step_time_s": 3.0, "process_max_rss_mb": 30},
        {"step": 3, "loss": 0.5, "correct_rate": True, "time_s": 1.5, "process_max_rss_mb": 20},
    ]
    write_rows(path, rows, tail=b'{"step": 4, "lo')
    scan = scan_metrics_file(path, mean_fields=["loss", "step_time_s", "absent"],
                             max_fields=["process_max_rss_mb"], series_fields=["correct_rate", "loss"])
    assert scan.rows == 3
    assert scan.first["step"] == 0 and scan.last["step"] == 3
    assert scan.wall_time_s == pytest.approx(6.5)
    assert scan.means == {"loss": pytest.approx(0.75), "step_time_s": pytest.approx(2.5)}
    assert scan.maxima == {"process_max_rss_mb": 30.0}
    assert scan.series["correct_rate"] == [(0, 0.1), (1, 0.3)]
    assert scan.series["loss"] == [(0, 1.0), (3, 0.5)]


def test_scan_metrics_file_missing_file_is_empty(tmp_path):
    scan = scan_metrics_file(tmp_path / "nope.jsonl", series_fields=["loss"])
    assert scan.rows == 0 and scan.last is None and scan.series == {"loss": []}
