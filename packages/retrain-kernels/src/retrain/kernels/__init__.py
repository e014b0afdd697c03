"""Kernels: selected-token logprobs and fused LoRA (Triton with exact torch fallbacks)."""
