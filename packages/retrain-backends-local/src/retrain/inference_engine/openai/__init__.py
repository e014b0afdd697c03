"""Sampling on an OpenAI-compatible inference server (vLLM, SGLang, `retrain serve`) over HTTP."""
