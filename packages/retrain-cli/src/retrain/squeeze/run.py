"""The squeeze workflow: analyse an adapter's ranks, recommend one, write the squeezed adapter.

The squeezed adapter keeps the update's scale exactly: alpha is rescaled to the integer
closest to alpha·k/r (alpha·√(k/r) with rsLoRA) and whatever rounding leaves is folded into
the factors, so scale'·B'·A' is the best rank-k approximation of scale·B·A (the reference
truncated alpha with int(), which changed the scale whenever alpha·k/r was not whole).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from retrain.config.errors import ConfigError, ConfigIssue
from retrain.config.schema import SqueezeConfig
from retrain.config.source import TomlSource
from retrain.errors import UserError
from retrain.squeeze.adapter import Adapter, AdapterError, Tensor, read_adapter, write_adapter
from retrain.squeeze.rank import (
    Factors,
    decompose,
    default_targets,
    lora_scale,
    mean_min_max,
    recommend,
    rescaled_alpha,
    retained,
    truncate,
)


@dataclass
class Analysis:
    adapter: Adapter
    source_rank: int
    threshold: float
    factors: dict[str, Factors]
    #: target rank -> (mean, min, max) of the retained variance over modules
    table: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    recommended: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"adapter": str(self.adapter.folder), "source_rank": self.source_rank, "modules": len(self.factors),
                "min_variance_retention": self.threshold, "recommended_rank": self.recommended,
                "ranks": [{"rank": k, "mean": m, "min": lo, "max": hi} for k, (m, lo, hi) in self.table.items()]}


def parse_squeeze(source: TomlSource) -> SqueezeConfig:
    table = source.data.get("squeeze")
    try:
        settings = msgspec.convert(table if isinstance(table, dict) else {}, SqueezeConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError([ConfigIssue(str(exc), key="[squeeze]", path=source.path,
                                       line=source.line_of("squeeze"))]) from None
    if settings.device != "cpu":
        raise ConfigError([ConfigIssue(f"squeezing on {settings.device!r} is not built yet in this version",
                                       key="[squeeze] device", path=source.path,
                                       line=source.line_of("squeeze", "device"),
                                       hint='device = "cpu" (the SVDs are r x r; the CPU is not the bottleneck)')])
    return settings


def analyse(path: str | Path, settings: SqueezeConfig) -> Analysis:
    adapter = read_adapter(path)
    pairs = adapter.pairs()
    if not pairs:
        raise AdapterError(f"{adapter.folder}: no lora_A / lora_B pairs in the adapter")
    ranks = {p.rank for p in pairs}
    if len(ranks) > 1:
        raise AdapterError(f"{adapter.folder}: modules of different ranks {sorted(ranks)}")
    source_rank = ranks.pop()
    if settings.source_rank and settings.source_rank != source_rank:
        raise UserError(f"[squeeze] source_rank = {settings.source_rank}, but the adapter in {adapter.folder} "
                        f"has rank {source_rank}", hint="remove source_rank; it is read from the adapter")
    targets = sorted(set(settings.target_ranks)) or default_targets(source_rank)
    bad = [k for k in targets if not 0 < k <= source_rank]
    if bad:
        raise UserError(f"[squeeze] target_ranks {bad} are outside 1..{source_rank} (the adapter's rank)")
    factors = {p.module: decompose(p.a, p.b) for p in pairs}
    table = {k: mean_min_max([retained(f.s, k) for f in factors.values()]) for k in targets}
    means = {k: v[0] for k, v in table.items()}
    return Analysis(adapter, source_rank, settings.min_variance_retention, factors, table,
                    recommend(means, settings.min_variance_retention, source_rank))


def squeeze_to(analysis: Analysis, rank: int, out: str | Path) -> Path:
    src = analysis.adapter
    if not 0 < rank <= analysis.source_rank:
        raise UserError(f"[squeeze] compress_to = {rank} is outside 1..{analysis.source_rank} (the adapter's rank)")
    config = copy.deepcopy(src.config)
    rslora = bool(config.get("use_rslora"))
    alpha = float(config.get("lora_alpha") or 2 * analysis.source_rank)
    new_alpha = rescaled_alpha(alpha, analysis.source_rank, rank, rslora)
    # what the integer alpha leaves of the scale, split evenly between the two factors
    fold = (lora_scale(alpha, analysis.source_rank, rslora) / lora_scale(new_alpha, rank, rslora)) ** 0.5
    tensors = dict(src.tensors)
    for name, tensor in src.tensors.items():
        if ".lora_A." not in name:
            continue
        module = name.split(".lora_A.")[0]
        partner = name.replace(".lora_A.", ".lora_B.")
        if module not in analysis.factors or partner not in src.tensors:
            continue
        a_new, b_new = truncate(analysis.factors[module], rank)
        tensors[name] = Tensor(tensor.dtype, a_new * fold)
        tensors[partner] = Tensor(src.tensors[partner].dtype, b_new * fold)
    config.update({"r": rank, "lora_alpha": new_alpha})
    metadata = {**src.metadata, "retrain_squeeze": f"rank {analysis.source_rank} -> {rank}"}
    return write_adapter(Adapter(Path(out), config, tensors, metadata), out)


def format_table(analysis: Analysis) -> str:
    lines = [f"LoRA-Squeeze: {analysis.adapter.folder} ({len(analysis.factors)} modules, rank {analysis.source_rank})",
             f"{'Rank':>6}  {'Mean Var%':>9}  {'Min Var%':>8}  {'Max Var%':>8}"]
    for k, (mean, lo, hi) in analysis.table.items():
        mark = "  <--" if k == analysis.recommended else ""
        lines.append(f"{k:>6}  {100 * mean:>9.2f}  {100 * lo:>8.2f}  {100 * hi:>8.2f}{mark}")
    lines.append(f"recommended rank: {analysis.recommended} (smallest keeping a mean "
                 f"{100 * analysis.threshold:.1f}% of the variance)")
    return "\n".join(lines)
