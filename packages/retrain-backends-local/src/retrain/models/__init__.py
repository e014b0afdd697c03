"""Model loading and model-specific compatibility for the local backend."""
