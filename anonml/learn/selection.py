"""Model selection fits a peer's row many times: find out how many, and mark the fitted model.

scikit-learn's model-selection routines (``GridSearchCV``, ``RandomizedSearchCV``,
the halving searches, ``cross_validate``, ``cross_val_score``,
``cross_val_predict``, ``validation_curve``, ``learning_curve``,
``permutation_test_score``) fit clones of one estimator on overlapping rows
and score them on raw held-out rows. Every fit is a fresh LDP release of
each training row (sequential composition: the ε_T add up), and the scoring
reads raw rows outside any mechanism, so no model that came out of such a
routine is private; its ``privacy_.private`` is False and
``privacy_.selection`` (:class:`ModelSelection`) lists the ε_T of every fit.

How the fits are counted, in every process (``n_jobs=1``, threads or loky's
worker processes): scikit-learn makes every clone in the process that runs
the routine — candidate clones in the dispatch loop, the refit clone in
``BaseSearchCV.fit`` — through ``clone``, which calls the estimator's
``__sklearn_clone__``. There the stack still holds the routine's frames, so
the clone reads the candidate list, the number of splits and whether it is
the refit (:func:`selection_context`) and carries that record with it when
joblib pickles it to a worker. A fit inside a routine that no clone record
explains (an estimator built inside another one's ``fit``, a routine this
module does not know) still finds scikit-learn's model-selection frames on
its own stack, in whatever process runs it, and is marked not private with
an incomplete list (``complete=False``) that says so.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from pydantic.dataclasses import dataclass as pydantic_dataclass

from anonml.learn.notices import NotPrivateWarning
from anonml.records import JsonRecord

__all__ = [
    "ModelSelection",
    "SelectionContext",
    "SelectionAware",
    "selection_context",
    "fit_selection",
    "epsilon_of",
]

#: Frames this far up the stack are searched (joblib adds a dozen between a routine and a clone).
_DEPTH = 120
_MODEL_SELECTION = f"sklearn{os.sep}model_selection{os.sep}"
#: Public routines, outermost name first when several are on the stack (cross_val_score → cross_validate).
_ROUTINES = (
    "permutation_test_score",
    "cross_val_score",
    "cross_val_predict",
    "validation_curve",
    "learning_curve",
    "cross_validate",
)


@pydantic_dataclass(frozen=True)
class ModelSelection(JsonRecord):
    """The fits a model-selection routine made on the rows a model was trained on.

    Attributes
    ----------
    wrapper : str
        The routine (``"GridSearchCV"``, ``"cross_validate"`` …).
    fits : int
        How many fits of the routine are known (this one included).
    fit_epsilons : tuple of float
        ε_T of each known fit whose ε is known.
    epsilon_sum : float
        ``Σ fit_epsilons``: by sequential composition, the most any one peer's
        report-pool row spent over those fits (a row held out of a fold spends
        nothing in it, but is scored raw, which no ε covers).
    complete : bool
        False when the routine runs fits this record cannot see (e.g. a
        search's refit, seen from a candidate fit) or when the fit ran where the
        routine's other fits were not visible.
    note : str
        How the fits were counted, in words.
    """

    wrapper: str
    fits: int
    fit_epsilons: tuple[float, ...]
    epsilon_sum: float
    complete: bool
    note: str


@dataclass(frozen=True)
class SelectionContext:
    """What a clone made by a model-selection routine learns from the stack at clone time.

    ``fit_epsilons`` are the ε_T of the routine's fits as far as they are known
    when the clone is made; ``includes_self`` says whether this clone's own fit
    is among them (a search's refit is not: its ε is known only once the best
    parameters are set, at fit time).
    """

    wrapper: str
    fits: int
    fit_epsilons: tuple[float, ...]
    includes_self: bool
    complete: bool
    note: str

    def record(self, own_epsilon: float) -> ModelSelection:
        """The :class:`ModelSelection` of the clone's fit, once its own ε_T is known."""
        epsilons = self.fit_epsilons if self.includes_self else (*self.fit_epsilons, float(own_epsilon))
        fits = self.fits if self.includes_self else self.fits + 1
        return ModelSelection(
            wrapper=self.wrapper,
            fits=int(fits),
            fit_epsilons=tuple(float(e) for e in epsilons),
            epsilon_sum=float(sum(epsilons)),
            complete=self.complete,
            note=self.note,
        )


def epsilon_of(estimator: Any) -> float | None:
    """ε_T of an AnonML estimator: ``epsilon``, or the regressor's ``classifier_params['epsilon']``."""
    if hasattr(estimator, "epsilon"):
        return float(estimator.epsilon)
    params = getattr(estimator, "classifier_params", None)
    if hasattr(estimator, "classifier_params"):
        return float((params or {}).get("epsilon", 1.0))
    return None


def _candidate_epsilon(parameters: Mapping[str, Any] | None, default: float | None) -> float | None:
    """ε_T a candidate's parameters set (``epsilon``, ``step__epsilon``, or in ``classifier_params``)."""
    for key, value in (parameters or {}).items():
        leaf = key.rsplit("__", 1)[-1]
        if leaf == "epsilon" and isinstance(value, (int, float)):
            return float(value)
        if leaf == "classifier_params" and isinstance(value, Mapping) and "epsilon" in value:
            return float(value["epsilon"])
    return default


def _frames(start: FrameType | None) -> list[FrameType]:
    frames = []
    frame = start
    while frame is not None and len(frames) < _DEPTH:
        frames.append(frame)
        frame = frame.f_back
    return frames


def _is_model_selection(frame: FrameType) -> bool:
    return _MODEL_SELECTION in frame.f_code.co_filename


def _search_object(frames: Sequence[FrameType]) -> Any:
    search = sys.modules.get("sklearn.model_selection._search")
    base = getattr(search, "BaseSearchCV", None)
    if base is None:
        return None
    for frame in frames:
        owner = frame.f_locals.get("self")
        if isinstance(owner, base):
            return owner
    return None


def _search_context(
    search: Any, frames: Sequence[FrameType], own: float | None, refit: bool
) -> SelectionContext:
    """A search's candidates × splits, from the frames of ``BaseSearchCV.fit`` and ``evaluate_candidates``."""
    wrapper = type(search).__name__
    candidates: list[Mapping[str, Any]] | None = None
    n_splits: int | None = None
    for frame in frames:
        local = frame.f_locals
        if n_splits is None and isinstance(local.get("n_splits"), int):
            n_splits = int(local["n_splits"])
        if candidates is None and "all_candidate_params" in local:
            done = list(local["all_candidate_params"])
            # inside evaluate_candidates the current batch is not yet in all_candidate_params
            batch = list(local.get("candidate_params") or []) if not refit else []
            candidates = done + batch
    if n_splits is None:
        n_splits = getattr(search, "n_splits_", None)
    how = "from the search's frames"
    if candidates is None and hasattr(search, "param_grid"):
        from sklearn.model_selection import ParameterGrid  # noqa: PLC0415 - only when a search runs

        candidates, how = list(ParameterGrid(search.param_grid)), "from its param_grid"
    if candidates is None or n_splits is None:
        return SelectionContext(
            wrapper,
            1,
            () if own is None else (own,),
            True,
            False,
            f"{wrapper}: candidates and splits not visible where this clone was made; "
            "at least this fit, ε of the others unknown",
        )
    epsilons = [_candidate_epsilon(c, own) for c in candidates for _ in range(int(n_splits))]
    known = tuple(float(e) for e in epsilons if e is not None)
    refits = bool(getattr(search, "refit", False))
    note = (
        f"{wrapper}: {len(candidates)} candidate(s) × {n_splits} split(s) ({how})"
        + (" + the refit on all rows" if refits else "")
        + ("" if refit or not refits else "; the refit is not counted in this candidate fit's record")
    )
    return SelectionContext(
        wrapper,
        len(epsilons),
        known,
        includes_self=not refit,
        complete=(refit or not refits) and len(known) == len(epsilons),
        note=note,
    )


def _routine_context(name: str, frames: Sequence[FrameType], own: float | None) -> SelectionContext:
    """cross_validate and friends: how many fits of this estimator, each at its own ε (or a param_range)."""
    local: dict[str, Any] = {}
    for frame in frames:
        if frame.f_code.co_name in _ROUTINES and _is_model_selection(frame):
            local = {**frame.f_locals, **local}  # the innermost routine's variables win
    n_splits = None
    for key in ("indices", "splits", "cv_iter"):
        if isinstance(local.get(key), list):
            n_splits = len(local[key])
            break
    if n_splits is None and local.get("cv") is not None and hasattr(local["cv"], "get_n_splits"):
        try:
            n_splits = int(local["cv"].get_n_splits(local.get("X"), local.get("y"), local.get("groups")))
        except (TypeError, ValueError):
            n_splits = None
    per_split: list[float | None] = [own]
    if name == "validation_curve" and local.get("param_range") is not None:
        param = str(local.get("param_name", ""))
        per_split = [_candidate_epsilon({param: v}, own) for v in local["param_range"]]
    elif name == "learning_curve" and local.get("train_sizes_abs") is not None:
        per_split = [own] * len(local["train_sizes_abs"])
    elif name == "permutation_test_score":
        per_split = [own] * (int(local.get("n_permutations", 0)) + 1)
    if n_splits is None:
        return SelectionContext(
            name,
            1,
            () if own is None else (own,),
            True,
            False,
            f"{name}: its splits were not visible where this clone was made; at least this fit",
        )
    epsilons = [e for _ in range(n_splits) for e in per_split]
    known = tuple(float(e) for e in epsilons if e is not None)
    return SelectionContext(
        name,
        len(epsilons),
        known,
        includes_self=True,
        complete=len(known) == len(epsilons),
        note=f"{name}: {n_splits} split(s) × {len(per_split)} fit(s) per split",
    )


def selection_context(estimator: Any, start: FrameType | None) -> SelectionContext | None:
    """The model-selection routine on the stack above ``start`` (a clone's caller), or None.

    Called from ``__sklearn_clone__``: the routine is then in this process and
    thread, with its candidates and splits in its frames' locals.
    """
    frames = _frames(start)
    inside = [f for f in frames if _is_model_selection(f)]
    if not inside:
        return None
    own = epsilon_of(estimator)
    search = _search_object(inside)
    if search is not None:
        # the refit clone is made by BaseSearchCV.fit itself, candidates in its dispatch loop
        refit = inside[0].f_code.co_name == "fit"
        return _search_context(search, inside, own, refit)
    names = [f.f_code.co_name for f in inside if f.f_code.co_name in _ROUTINES]
    if names:
        outermost = min(names, key=_ROUTINES.index)
        return _routine_context(outermost, inside, own)
    return SelectionContext(
        inside[0].f_code.co_name,
        1,
        () if own is None else (own,),
        True,
        False,
        f"scikit-learn model selection ({inside[0].f_code.co_name}); its other fits are not known",
    )


def fit_selection(
    estimator: Any, context: SelectionContext | None, start: FrameType | None
) -> ModelSelection | None:
    """The :class:`ModelSelection` of a fit: from the clone's record, else from the fit's own stack.

    Without a clone record, scikit-learn's model-selection frames on the fit's
    stack (``_fit_and_score`` in a worker process, for one) still show that
    the fit is one of a routine's; its other fits are then unknown.
    """
    own = epsilon_of(estimator)
    if context is not None:
        return context.record(own if own is not None else 0.0)
    inside = [f for f in _frames(start) if _is_model_selection(f)]
    if not inside:
        return None
    where = inside[-1].f_code.co_name
    epsilons = () if own is None else (own,)
    return ModelSelection(
        wrapper=where,
        fits=1,
        fit_epsilons=epsilons,
        epsilon_sum=float(sum(epsilons)),
        complete=False,
        note=(
            f"fitted inside scikit-learn model selection ({where}) with no record from the clone: "
            "the routine's other fits are not visible here, so only this one is listed"
        ),
    )


class SelectionAware:
    """Mixin of the AnonML estimators: a clone made by a model-selection routine records the routine.

    ``__sklearn_clone__`` is scikit-learn's cloning hook (``sklearn.base.clone``
    calls it); the record (:func:`selection_context`) is kept in the clone's
    ``_anonml_selection`` attribute, which travels with the clone when joblib
    pickles it into a worker process, and is read by ``fit``. The warning is
    given here, in the routine's own process, where it is seen at any ``n_jobs``.
    """

    def __sklearn_clone__(self) -> Any:
        clone = super().__sklearn_clone__()  # type: ignore[misc]
        context = selection_context(self, sys._getframe(2))
        if context is not None:
            clone._anonml_selection = context
            warnings.warn(
                f"{type(self).__name__} fitted inside {context.wrapper}: model selection fits each row "
                f"many times (the ε_T add up) and scores candidates on raw rows, so it is not private; "
                f"the fitted model's privacy_.private is False and privacy_.selection lists the fits "
                f"({context.note})",
                NotPrivateWarning,
                stacklevel=3,
            )
        return clone
