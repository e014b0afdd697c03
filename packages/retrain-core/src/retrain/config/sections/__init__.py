"""The `TrainConfig` sections, grouped by what they configure; `retrain.config.schema` re-exports
every name."""
