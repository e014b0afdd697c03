"""The live exporter behind `retrain status serve`: /metrics, /v1/runs and /healthz."""
