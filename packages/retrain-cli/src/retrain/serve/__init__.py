"""`retrain serve`: an OpenAI-compatible HTTP server over retrain's PyTorch sampling engine."""
