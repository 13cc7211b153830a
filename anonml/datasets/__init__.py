"""Dataset loaders (UCI Adult) and simulators (MOOC students writing edX logs)."""
