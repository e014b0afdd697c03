"""docs/reliability.md names the test that keeps each fault case; every one it names exists, so
the page cannot cite a test that was renamed or removed."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CITED = re.compile(r"`((?:tests|packages)/[\w/.-]+\.py)(?:::(\w+))?`")


def test_every_test_the_reliability_page_names_exists() -> None:
    page = (REPO / "docs" / "reliability.md").read_text()
    cited = CITED.findall(page)
    assert len(cited) >= 29, cited  # the 26 cases that behaved and the three items fixed here
    for path, name in cited:
        source = REPO / path
        assert source.is_file(), path
        if name:
            assert re.search(rf"^def {name}\(", source.read_text(), re.M), f"{path}::{name}"
