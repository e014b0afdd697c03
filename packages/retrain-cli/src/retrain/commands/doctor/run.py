"""`retrain doctor [CONFIG] [--json]`: what is installed and usable on this machine, and whether
CONFIG's inference server answers. Exit 0 (2 only when CONFIG does not load)."""

from __future__ import annotations

import json

from retrain.backends.catalog import all_entries
from retrain.commands.doctor.probe import (
    cuda_devices,
    machine,
    packaged_models,
    packages,
    unsloth_here,
)
from retrain.commands.doctor.server import (
    backend_service_line,
    probe_backend_service,
    probe_server,
    server_line,
)
from retrain.registry.health import installed_versions


def report(config: str | None = None) -> dict[str, object]:
    out: dict[str, object] = {
        "machine": machine(),
        "cuda": cuda_devices(),
        "retrain": installed_versions(),
        "backends": [{"name": e.name, "status": e.status, "distribution": e.definition.distribution,
                      "hint": e.definition.hint} for e in all_entries()],
        "packages": packages(),
        "packaged_models": packaged_models(),
    }
    out["unsloth_runs_here"] = unsloth_here(out["cuda"]["count"])  # type: ignore[index]
    if config is not None:
        from retrain.validation.load import load_config

        c = load_config(config).config
        out["inference_server"] = probe_server(c.inference.engine, c.inference.url)
        if (service := probe_backend_service(c)) is not None:
            out["backend_service"] = service
    return out


def run(as_json: bool, config: str | None = None) -> None:
    r = report(config)
    if as_json:
        print(json.dumps(r, indent=2))
        return
    m, cuda = r["machine"], r["cuda"]
    assert isinstance(m, dict) and isinstance(cuda, dict)
    lines = [f"Python {m['python']} on {m['platform']} — {m['cpu_count']} CPUs, {m['memory_gib']} GiB"]
    if cuda["count"]:
        lines.append(f"CUDA devices: {cuda['count']}" + (f" ({'; '.join(cuda['names'])})" if cuda["names"] else ""))
    else:
        lines.append("CUDA devices: none found (training runs on the CPU: devices = \"cpu\")")
    lines += ["", "retrain distributions:"]
    versions = r["retrain"]
    assert isinstance(versions, dict)
    lines += [f"  {name:<26} {v or 'not installed'}" for name, v in versions.items()]
    lines += ["", "Backends:"]
    for b in r["backends"]:  # type: ignore[attr-defined]
        lines.append(f"  {b['name']:<9} {b['status']}" + ("" if b["status"] == "available" else f" — {b['hint']}"))
        if b["name"] == "unsloth":
            lines.append(f"            runs here: {r['unsloth_runs_here']}")
    lines += ["", "Optional packages:"]
    missing = 0
    for p in r["packages"]:  # type: ignore[attr-defined]
        state = f"OK {p['version'] or ''}".rstrip() if p["available"] else "MISSING"
        missing += not p["available"]
        lines.append(f"  {p['module']:<22} {state:<16} {p['purpose']}" + ("" if p["available"] else f"  ({p['hint']})"))
    lines += ["", "All optional packages are installed." if not missing else f"{missing} optional packages are missing."]
    lines += ["", "Packaged models ([model] model = NAME):"]
    for pm in r["packaged_models"]:  # type: ignore[attr-defined]
        state = f"installed ({pm['distribution']} {pm['version']})" if pm["version"] else f"not installed ({pm['hint']})"
        lines.append(f"  {pm['model']:<22} {state}")
    service = r.get("backend_service")
    if isinstance(service, dict):
        lines += ["", backend_service_line(service)]
    server = r.get("inference_server")
    if isinstance(server, dict):
        lines += ["", server_line(server)]
    elif "inference_server" in r and not isinstance(service, dict):
        lines += ["", 'Inference: engine = "pytorch" samples in-process (no server to probe)']
    print("\n".join(lines))
