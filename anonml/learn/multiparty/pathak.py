"""Parameter averaging with output perturbation (Pathak, Rane & Raj 2010).

Each of K parties fits regularised logistic regression on its own n_k records,

    w_k = argmin_w (1/n_k) Σ_{i∈k} log(1 + exp(-y_i wᵀx_i)) + (λ/2)‖w‖²,

and the curator releases ŵ = (1/K) Σ_k w_k + η with p(η) ∝ exp(-(K n_(1) λ ε/2)‖η‖),
n_(1) = min_k n_k. Changing one record of party j moves w_j by at most 2/(n_j λ)
(Chaudhuri et al. 2011, Corollary 8: |l'| ≤ 1, ‖x‖ ≤ 1, λ-strong convexity), hence
the average by at most 2/(K n_j λ) ≤ 2/(K n_(1) λ): the noise is calibrated to the
smallest party, so one small party makes the release noisy for everyone — the
weakness Rajkumar & Agarwal (2012) address.

The paper computes the sum and the noise with additive homomorphic encryption
so that the curator never sees a w_k; we compute the same released vector
directly (the cryptographic layer changes who sees what, not the output).
"""

from __future__ import annotations

import numpy as np

from anonml.learn.multiparty.base import PRIVATE_ERM_CONSTRAINTS, LinearMultipartyClassifier
from anonml.learn.multiparty.common import (
    PrivacyGuarantee,
    PrivacyUnit,
    check_parties,
    sample_norm_noise,
)
from anonml.learn.multiparty.erm import fit_linear_erm
from anonml.learn.params import checked_fit, store_params
from anonml.randomness import generator_from

__all__ = ["ParameterAveraging"]


class ParameterAveraging(LinearMultipartyClassifier):
    """Average of locally trained logistic regressions plus noise for the smallest party.

    Parameters
    ----------
    epsilon : float, default=1.0
        ε of the released average (ε-DP per record).
    lam : float, default=1e-3
        λ of every party's (λ/2)‖w‖² regulariser.
    random_state : int, Generator or None, default=None
        ``None`` seeds the noise from the OS CSPRNG.

    Attributes
    ----------
    coef_ : ndarray of shape (1, d)
        ŵ, the noisy average.
    local_coefs_ : ndarray of shape (K, d)
        The parties' w_k (simulation only: in the protocol nobody sees them).
    smallest_party_ : int
        n_(1), the size the noise is calibrated to.
    noise_norm_ : float
        ‖η‖ of the noise actually added (E‖η‖ = 2d/(K n_(1) λ ε)).
    classes_ : ndarray of shape (2,)
    privacy_ : PrivacyGuarantee

    References
    ----------
    Pathak, Rane & Raj, "Multiparty differential privacy via aggregation of
    locally trained classifiers", NIPS 2010, sec. 3-4.
    """

    param_checks: dict = {
        **PRIVATE_ERM_CONSTRAINTS,
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        lam: float = 1e-3,
        random_state: int | np.random.Generator | None = None,
    ) -> None:
        store_params(self, locals())

    @checked_fit
    def fit(self, X: np.ndarray, y: np.ndarray, parties: np.ndarray | None = None) -> ParameterAveraging:
        """Fit one model per party, average, perturb.

        Parameters
        ----------
        X : ndarray of shape (n, d), rows with ‖x‖ ≤ 1
        y : ndarray of shape (n,), two classes
        parties : ndarray of shape (n,)
            The party holding each row.
        """
        X, y_pm, classes = self._binary_training_data(X, y)
        parties, ids = check_parties(parties, X.shape[0])
        local = np.vstack([fit_linear_erm(X[parties == k], y_pm[parties == k], self.lam) for k in ids])
        sizes = np.array([np.count_nonzero(parties == k) for k in ids])
        n_min = int(sizes.min())
        beta = len(ids) * n_min * self.lam * self.epsilon / 2.0
        eta = sample_norm_noise(X.shape[1], beta, rng=generator_from(self.random_state))
        self.local_coefs_ = local
        self.smallest_party_ = n_min
        self.noise_norm_ = float(np.linalg.norm(eta))
        self._set_binary(
            local.mean(axis=0) + eta,
            classes,
            PrivacyGuarantee(
                PrivacyUnit.RECORD,
                float(self.epsilon),
                0.0,
                "output perturbation of the averaged local models, sensitivity 2/(K n_min lam) "
                "(Pathak et al. 2010)",
            ),
        )
        return self
