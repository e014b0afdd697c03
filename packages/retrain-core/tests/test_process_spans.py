"""Timing spans: nested names, one collector per context (a thread of its own records into no
step's), a span without a collector still timed, and `sync` called around the block."""

from __future__ import annotations

import threading

import pytest

from retrain.process.spans import Spans, span


def test_nested_spans_add_up_under_their_path() -> None:
    with Spans().collect() as spans:
        with span("train") as train:
            for _ in range(2):
                with span("forward"):
                    pass
            with span("backward"):
                pass
        with span("sync"):
            pass
    assert set(spans.totals) == {"train", "train/forward", "train/backward", "sync"}
    assert spans.seconds("train") == train.seconds >= spans.seconds("train/forward") + spans.seconds("train/backward")
    assert spans.seconds("sample") == 0.0
    assert set(spans.fields()) == {"train_time_s", "train/forward_time_s", "train/backward_time_s", "sync_time_s"}
    assert spans.elapsed() >= spans.seconds("train") + spans.seconds("sync")


def test_without_a_collector_a_span_is_timed_and_kept_nowhere() -> None:
    outer = Spans()
    with span("sample") as timed:
        pass
    assert timed.path == "sample" and timed.seconds >= 0.0 and outer.totals == {}


def test_a_span_that_raises_is_recorded_and_the_path_unwinds() -> None:
    with Spans().collect() as spans:
        with pytest.raises(ValueError), span("train"), span("forward"):
            raise ValueError("boom")
        with span("sync"):
            pass
    assert set(spans.totals) == {"train", "train/forward", "sync"}


def test_another_thread_records_into_no_collector_of_this_one() -> None:
    seen: list[str] = []

    def produce() -> None:
        with span("sample") as timed:
            seen.append(timed.path)

    with Spans().collect() as spans, span("step"):
        worker = threading.Thread(target=produce)
        worker.start()
        worker.join()
    assert seen == ["sample"] and set(spans.totals) == {"step"}


def test_sync_is_called_before_and_after_the_block() -> None:
    calls: list[str] = []
    with span("forward", lambda: calls.append("sync")):
        calls.append("block")
    assert calls == ["sync", "block", "sync"]
