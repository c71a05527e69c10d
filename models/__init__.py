"""Duration, peak-GPU-memory and topology estimators; baselines; training, evaluation and the MLflow
registry. Imports ``features`` only."""
