"""Resume contracts: what a checkpoint of a backend restores, as a label and a warning."""

from __future__ import annotations

from retrain.backends.catalog import BackendCapabilities

RESUME_WARNINGS = {
    "unsupported": "this backend cannot resume from a checkpoint; a resumed run starts from the base model",
    "adapter_only": "restores trainer counters and checkpoint weights, but not optimizer/scaler/RNG state; "
                    "a resumed run diverges from an uninterrupted one",
    "exact": "",
}
RUNTIME_DEPENDENT_WARNING = ("resume depends on the remote service keeping the checkpoint; "
                             "bit-identity is not guaranteed across service versions")


def resume_contract(caps: BackendCapabilities) -> tuple[str, str]:
    """(resume mode, warning) for a backend's capabilities."""
    mode = caps.checkpoint_resume_mode if caps.supports_checkpoint_resume else "unsupported"
    warning = RESUME_WARNINGS[mode]
    if mode == "exact" and caps.resume_runtime_dependent:
        warning = RUNTIME_DEPENDENT_WARNING
    return mode, warning
