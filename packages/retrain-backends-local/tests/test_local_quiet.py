"""Third-party output is silenced only where it arises: the filters and switches are scoped to
their block and leave the process as they found it."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from transformers.utils import logging as hf_logging

from retrain.models.quiet import ENUM_REGISTRATION, dropped_log_records, no_progress_bars


def test_dropped_log_records_only_matching_and_only_inside(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("retrain.test.quiet")
    with caplog.at_level(logging.WARNING, logger="retrain.test.quiet"):
        with dropped_log_records("retrain.test.quiet", "deprecated enum"):
            log.warning("a deprecated enum registration")
            log.warning("something else")
        log.warning("a deprecated enum again")
    assert [r.getMessage() for r in caplog.records] == ["something else", "a deprecated enum again"]
    assert log.filters == []


def test_no_progress_bars_restores_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert hf_logging.is_progress_bar_enabled()
    with no_progress_bars():
        assert list(hf_logging.tqdm(range(3), desc="Writing model shards")) == [0, 1, 2]
    assert capsys.readouterr().err == ""
    assert hf_logging.is_progress_bar_enabled()
    list(hf_logging.tqdm(range(3), desc="Writing model shards"))
    assert "Writing model shards" in capsys.readouterr().err
    hf_logging.disable_progress_bar()
    try:
        with no_progress_bars():
            pass
        assert not hf_logging.is_progress_bar_enabled(), "a user's choice of no bars was undone"
    finally:
        hf_logging.enable_progress_bar()


def test_model_classes_import_without_torch_records() -> None:
    """In a fresh process (the import happens once): torch's enum-registration records are
    dropped, and the filter is gone afterwards."""
    code = (
        "import logging\n"
        "from retrain.models.quiet import import_model_classes\n"
        "import_model_classes()\n"
        "import transformers.modeling_utils, peft\n"
        "print(logging.getLogger('torch.utils._pytree').filters)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert ENUM_REGISTRATION not in proc.stderr, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.strip() == "[]"


def test_loading_a_local_folder_draws_no_bar(tmp_path, capfd: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from retrain.models.load import ModelSpec, load_model

    load_model(ModelSpec("tiny"), seed=0).save_pretrained(tmp_path)
    capfd.readouterr()
    model = load_model(ModelSpec(str(tmp_path)), seed=0)
    assert sum(p.numel() for p in model.parameters()) > 0
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()
