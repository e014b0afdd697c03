"""Experiment trackers, a pluggable kind like the others: `[logging] trackers` names any
number (`wandb_project` still selects W&B alone), each resolved through the registry's
`tracker` kind (built-ins, entry points of group `retrain.trackers`, dotted paths) to a factory
`(config) -> Sink` (`sink`). Every trainer writes through them: the RL loop and TTT-Discover,
supervised warmup and the SFT trainer through their run log (retrain.training.log), the command
and optimizer-replay trainers through `select.tracking`.

Built-ins, each an optional extra of retrain-core imported only when selected: `wandb`,
`tensorboard` (event files under `<log_dir>/tensorboard`), `mlflow` (a file store under
`<log_dir>/mlruns` unless `MLFLOW_TRACKING_URI` says otherwise) and `trackio` (its local store).
Every tracker sees the same names: a metrics row's numbers as `train/<key>`, an evaluation
row's as its `eval/...` keys, at the run's global step. `checkpoints` decides which trackers
store each saved checkpoint (`checkpoint_artifacts`).
"""
