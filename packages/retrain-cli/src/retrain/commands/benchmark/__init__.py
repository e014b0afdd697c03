"""`retrain benchmark`: repeated runs and their spread."""
