"""The built-in policy losses, one module each (retrain.backends.objective says what a record
holds); each module's `OBJECTIVE` is what `[training] policy_loss_mode` names."""
