"""What fixes one simulated fit besides the rows and the randomness: :class:`SimulationConfig`.

The settings :func:`~anonml.learn.simulation.simulate_training` runs with — ε_T,
the plan (k_p, k_h, k_s), the bins, the median, calibration and pilot pools,
the consistency step — and that the accounting reads
(:mod:`anonml.learn.accounting`). A classifier derives one from its
hyperparameters (:func:`~anonml.learn.hyperparameters.config_from_params`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SimulationConfig"]


@dataclass(frozen=True)
class SimulationConfig:
    """Everything that fixes one simulated training run except the data and the randomness.

    Attributes
    ----------
    epsilon : float
        ε_T, each peer's total privacy loss.
    n_partitions, n_subsets, subset_size : int
        k_p, k_h, k_s.
    subsets : tuple of tuples of int, optional
        Data-scientist subsets (see :func:`~anonml.learn.partition.make_plan`).
    n_bins : int or "auto"
        Bins per numeric feature.
    median_fraction : float
        Largest share of peers in the median pool; it takes fewer when its
        questions need fewer (:func:`~anonml.privacy.median.median_pool_size`).
    median_steps : int
        Questions (fresh partitions) per quantile search.
    median_confidence : float
        Confidence of the search's stopping margin (lower moves more readily).
    consistency : str or None
        Consistency step of the count estimates.
    n_classes : int
        K, the label domain of every report (2 for a binary problem).
    calibration_fraction : float
        Share of peers set apart (a third disjoint pool) to report
        (score bin, label) for the calibration map once the model is built.
    pilot_fraction : float
        Single-feature plans only (k_s = k_h = 1, no given subsets): share of
        the report peers that report first, one group per feature; features
        whose pilot histogram shows no label dependence beyond the noise
        (:func:`select_features`) get no further reports, and the remaining
        report peers are split over the kept features. Every report peer still
        sends one report: the pilot costs no budget, and its histograms are
        pooled into the model.
    shuffle_delta : float, optional
        δ of the shuffle bound (a central target's); default
        :func:`~anonml.privacy.amplification.default_delta` of the smallest group.
    """

    epsilon: float
    n_partitions: int
    n_subsets: int = 1
    subset_size: int = 1
    subsets: tuple[tuple[int, ...], ...] | None = None
    n_bins: int | str = "auto"
    median_fraction: float = 0.15
    median_steps: int = 3
    median_confidence: float = 0.5
    consistency: str | None = "norm_sub"
    n_classes: int = 2
    calibration_fraction: float = 0.0
    pilot_fraction: float = 0.0
    shuffle_delta: float | None = None
