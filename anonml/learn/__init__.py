"""Learning from private histograms: partition plans, ensembles, multiparty baselines."""
