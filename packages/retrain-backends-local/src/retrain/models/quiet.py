"""Third-party output a retrain user should not see, silenced where it arises and nowhere else.

- Importing transformers' model classes (peft imports them too) imports torchao when it is
  installed; torchao registers two enums as pytree constants, and torch logs a deprecation
  warning for each through the `torch.utils._pytree` logger. The warning is addressed to
  torchao's authors. Only those two records are dropped, only during that import.
- peft imports bitsandbytes when it is installed; on a CPU with AVX512-BF16, bitsandbytes
  looks for an optional 4-bit kernel from the `kernels` hub package and, without it, logs
  "Failed to load CPU gemm_4bit_forward from kernels-community" (retrain loads no 4-bit
  models on the CPU). That one record is dropped, only during that import.
- `save_pretrained` draws a "Writing model shards" tqdm bar at every checkpoint, through the
  run's own progress. Bars are switched off around the call and back on after, so code around
  retrain keeps its own settings. Loading from a folder on this machine (a packaged GGUF's
  conversion included) draws transformers' "Loading weights" bar: off around that call too.
  Loading a hub checkpoint keeps its bars: the download can take minutes, and it happens
  once, before training starts.
- transformers logs "`f` is falling back to its reference PyTorch implementation because
  `package` is not installed" at the first call of each such function (Qwen3.5's gated delta
  rule and causal conv1d, other hybrid models' kernels). The line is dropped and the fact kept:
  `kernel_fallbacks()` is one metric of retrain's in the step row, `local_kernel_fallbacks`
  (Qwen3.5's own choice is `local_qwen35_gated_delta_kernel`: `retrain.models.qwen35`).
- Loading a multimodal checkpoint's text model alone lists every tower tensor as unexpected
  in transformers' load report; that report is dropped there (`retrain.models.multimodal`
  checks the text weights itself).
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

ENUM_REGISTRATION = "is an Enum subclass and is now natively supported"
BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"
BNB_CPU_KERNEL = "Failed to load CPU gemm_4bit_forward from kernels-community"


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


@contextmanager
def dropped_log_records(logger: str, text: str) -> Iterator[None]:
    """Records of `logger` whose message contains `text` are dropped inside the block."""
    log = logging.getLogger(logger)
    drop = _DropMessage(text)
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


KERNELS_LOGGER = "transformers.integrations.hub_kernels"
FALLBACK = re.compile(r"`(?P<function>[^`]+)` is falling back to its reference PyTorch implementation "
                      r"because `(?P<package>[^`]+)` is not installed")


class _KernelFallbacks(logging.Filter):
    """Drops transformers' fallback lines and keeps what they said: function -> package."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        found = FALLBACK.search(record.getMessage())
        if found is None:
            return True
        self.seen[found["function"]] = found["package"]
        return False


_FALLBACKS = _KernelFallbacks()


def kernel_fallbacks() -> dict[str, str]:
    """`local_kernel_fallbacks`: the functions transformers ran on its torch reference in this
    process because their package is missing ("f (package), ..."); empty when none did."""
    if not _FALLBACKS.seen:
        return {}
    return {"local_kernel_fallbacks": ", ".join(f"{f} ({p} not installed)" for f, p in sorted(_FALLBACKS.seen.items()))}


def import_model_classes() -> None:
    """Import transformers' model classes (and torchao through them) without torch's enum
    registration warnings, and peft (and bitsandbytes through it) without bitsandbytes'
    note about an optional CPU kernel. Idempotent: later imports find them loaded. From then on
    transformers' kernel fallback lines are kept out of the terminal (`kernel_fallbacks`)."""
    log = logging.getLogger(KERNELS_LOGGER)
    if _FALLBACKS not in log.filters:
        log.addFilter(_FALLBACKS)
    with dropped_log_records("torch.utils._pytree", ENUM_REGISTRATION):
        import transformers.modeling_utils  # noqa: F401
    with dropped_log_records(BNB_CPU_LOGGER, BNB_CPU_KERNEL):
        import peft  # noqa: F401


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' (and huggingface_hub's) tqdm bars off inside the block, restored after."""
    from transformers.utils import logging as hf_logging

    if not hf_logging.is_progress_bar_enabled():
        yield
        return
    with warnings.catch_warnings():
        # huggingface_hub refuses (with a warning) when HF_HUB_DISABLE_PROGRESS_BARS=0 is set;
        # transformers' own bars are still switched off.
        warnings.filterwarnings("ignore", message="Cannot disable progress bars", category=UserWarning)
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()


@contextmanager
def no_gguf_bars() -> Iterator[None]:
    """transformers' GGUF reader draws its own tqdm bar ("Converting and de-quantizing GGUF
    tensors"), which `disable_progress_bar` does not reach: off inside the block."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as reader

    bar = reader.tqdm
    reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        reader.tqdm = bar
