"""Plot of a multiparty benchmark: test error against ε, one panel per (K, skew).

Needs matplotlib (the ``plot`` extra); :func:`~anonml.learn.plotting.require_pyplot`
says so when it is missing. Non-private references (ε = ∞) are drawn as horizontal lines;
the printed-condition reproductions, run at a nominal ε with no guarantee, as dashed
series labelled NON-PRIVATE. Rows pooled over K have a panel of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from anonml.learn.multiparty.common import MultipartyError
from anonml.learn.multiparty.harness import POOLED, ResultRow
from anonml.learn.plotting import require_pyplot

__all__ = ["plot_results"]


def plot_results(rows: Sequence[ResultRow], path: str | Path, metric: str = "error") -> Path:
    """Write a PNG of ``metric`` ("error" or "auc") against ε for every method.

    Parameters
    ----------
    rows : the rows of :func:`run_multiparty_benchmark`
    path : output file (parents created)
    metric : {"error", "auc"}
    """
    plt = require_pyplot()
    if metric not in ("error", "auc"):
        raise MultipartyError(f"metric must be 'error' or 'auc', got {metric!r}")
    attr, sem_attr = ("error_mean", "error_sem") if metric == "error" else ("auc_mean", "auc_sem")
    panels = sorted({(r.parties, r.skew) for r in rows})
    if not panels:
        raise MultipartyError("no rows to plot")
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False, sharey=True)
    for ax, (k, skew) in zip(axes[0], panels, strict=True):
        mine = [r for r in rows if (r.parties, r.skew) == (k, skew) and getattr(r, attr) is not None]
        for method in dict.fromkeys(r.method for r in mine):
            series = sorted((r for r in mine if r.method == method), key=lambda r: r.run_epsilon or 0.0)
            if series[0].run_epsilon is None:
                ax.axhline(
                    getattr(series[0], attr), linestyle="--", linewidth=1, label=f"{method} (non-private)"
                )
                continue
            xs = [r.run_epsilon for r in series]
            ys = [getattr(r, attr) for r in series]
            errs = [getattr(r, sem_attr) or 0.0 for r in series]
            if series[0].epsilon is None:  # a nominal ε: no guarantee behind it
                ax.errorbar(
                    xs, ys, yerr=errs, marker="x", linestyle=":", capsize=2, label=f"{method} (NON-PRIVATE)"
                )
                continue
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=2, label=method)
        ax.set_xscale("log")
        ax.set_xlabel("ε")
        ax.set_title("pooled over K and skew" if (k, skew) == POOLED else f"K={k}, {skew}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")  # each panel has its own methods (pooled ones apart)
    axes[0][0].set_ylabel("test error" if metric == "error" else "ROC AUC")
    fig.suptitle(f"{rows[0].dataset}: {metric} vs ε (privacy units differ across methods)")
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target
