"""`retrain squeeze.toml`: the rank table of an adapter, and the squeezed adapter when
`[squeeze] output_path` is set."""

from __future__ import annotations

import sys

from retrain.config import ConfigError, ConfigIssue, read_toml


def run(path: str) -> None:
    from retrain.squeeze.run import analyse, format_table, parse_squeeze, squeeze_to

    source = read_toml(path)
    settings = parse_squeeze(source)
    if not settings.adapter_path:
        raise ConfigError([ConfigIssue("required for a squeeze config", key="[squeeze] adapter_path", path=path,
                                       line=source.line_of("squeeze"))])
    analysis = analyse(settings.adapter_path, settings)
    print(format_table(analysis))
    if settings.output_path:
        rank = settings.compress_to or analysis.recommended
        out = squeeze_to(analysis, rank, settings.output_path)
        print(f"squeezed adapter (rank {rank}) written to {out}", file=sys.stderr)
