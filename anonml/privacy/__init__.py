"""Local differential privacy: mechanisms, estimators, private medians, budget ledger."""
