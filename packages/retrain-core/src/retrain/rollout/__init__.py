"""The contract between the RL loop and its plugins: the groups a step samples
(`group.Group`, `group.StepRollouts`), multi-turn episodes (`episode`), and single-turn
sampling through the backend (`sample.sample_texts`). It sits below retrain.training, which
reads it, and environments build on it without importing the loop."""
