"""Triton kernel sources. Private: import through `retrain.kernels.logprobs` / `.lora`.

Importing any module here imports triton and defines kernels; whether they compile for the GPU
or run in the numpy interpreter is fixed at that moment by `TRITON_INTERPRET`.
"""
