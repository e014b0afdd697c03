"""The rollout contract's old import path, kept for plugins written against it: `Group`,
`StepRollouts` and `sample_texts` live in retrain.rollout, one floor below training; one RL
step's computation is retrain.training.step."""

from retrain.rollout.group import Group as Group
from retrain.rollout.group import StepRollouts as StepRollouts
from retrain.rollout.sample import sample_texts as sample_texts

__all__ = ["Group", "StepRollouts", "sample_texts"]
