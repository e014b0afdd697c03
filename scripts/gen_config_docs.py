"""Write docs/configuration.md from the config schema (`--check`: fail if it is stale)."""

from __future__ import annotations

import sys
from pathlib import Path

from retrain.validation.page import render_markdown

TARGET = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def main() -> int:
    text = render_markdown()
    if "--check" in sys.argv[1:]:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is stale: run `uv run python scripts/gen_config_docs.py`", file=sys.stderr)
            return 1
        print(f"{TARGET} is up to date")
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
