"""Triton kernel sources. Private: import through `retrain.kernels.logprobs` / `.lora`.

Importing any module here imports triton and defines kernels; whether they compile for the GPU
or run in the numpy interpreter is fixed at that moment by `TRITON_INTERPRET`. Under the
interpreter, an interpreter bug of triton ≤ 3.6 with NumPy ≥ 2.4 is patched first
(`_interpreter_compat`).
"""

from retrain.kernels.accelerators import triton_interpreting

if triton_interpreting():
    from retrain.kernels.triton._interpreter_compat import patch_interpreter_index

    patch_interpreter_index()
