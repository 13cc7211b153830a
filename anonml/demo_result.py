"""What ``anonml demo`` did: its figures, the table it prints, and when it fell short."""

from __future__ import annotations

from dataclasses import dataclass, field

from anonml.phases import ProblemPhase
from anonml.protocol import ReportAccount

__all__ = ["DemoResult"]

@dataclass
class DemoResult:
    """What the demo did, what it cost in privacy, and how well the model predicts dropout."""

    students: int
    peers: int
    held_out: int
    events_imported: int
    examples: int
    dropout_rate: float
    features: list[str]
    epsilon: float
    auc: float
    auc_central: float
    auc_simulation: tuple[float, float]
    epsilon_per_peer: dict[str, float]
    packets_sent: int
    packets_relayed: int
    tokens_issued: int
    tokens_verified: int
    median_answers: int
    rejects: dict[str, int]
    relay_rejects: dict[str, int]
    problem_id: str
    witness_log: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    median_pool: int = 0
    reports: ReportAccount | None = None
    phase: str = ProblemPhase.DONE
    message: str = ""
    max_loss_fraction: float = 0.1
    #: AUC mean and sd of the in-process computation given this run's own plan and
    #: published bins (only the peers' perturbation drawn afresh); None when not computed.
    auc_same_run: tuple[float, float] | None = None
    #: The peer host's measured wall seconds per relay hop before the round (None: windows given).
    hop_seconds: float | None = None
    #: The round's send and release windows as the aggregator fixed them (seconds).
    packet_windows: tuple[float, float] | None = None
    #: The round's waits as the aggregator fixed them (``Schedule`` field → seconds; empty: not known).
    round_waits: dict[str, float] = field(default_factory=dict)
    #: The held-out AUC as the aggregator scored its own model on the held-out students' rows
    #: (``POST /problems/{id}/evaluation``, what its console shows); None when not scored.
    auc_aggregator: float | None = None
    #: Packets the peers gave up on: a first hop overloaded or down until the send window closed.
    packets_not_sent: int = 0
    #: How the peers' participations ended, phase → count (``partial``: a median-pool peer whose
    #: answer was not counted, the reason in its state database).
    participations: dict[str, int] = field(default_factory=dict)

    def shortfalls(self) -> list[str]:
        """Why the protocol's run fell short of what it should compute (empty: it did not).

        Short when the median pool answered nothing (the bins fell back to
        equal-width cuts), when more than ``max_loss_fraction`` of the expected
        reports were lost, when the problem ended anything but ``done``, or when
        the protocol's AUC is below the lower range (mean − 3 standard
        deviations, and at least 0.02 below the mean) of the in-process
        simulation — either the whole computation's, or, sharper, the one
        given this run's own plan and bins (:attr:`auc_same_run`), which a
        report round that lost or garbled nothing matches up to the peers'
        perturbation whatever bins the median search found.
        """
        out: list[str] = []
        if self.phase != ProblemPhase.DONE:
            out.append(f"the problem ended {str(self.phase)!r}: {self.message or 'no message'}")
        if self.median_pool > 0 and self.median_answers == 0:
            out.append(
                f"none of the {self.median_pool} median-pool peers answered a median query, so the bins "
                "are equal-width cuts of the declared ranges, not private medians"
            )
        if self.reports is not None and self.reports.lost_fraction > self.max_loss_fraction:
            out.append(f"{self.reports.describe()}, more than the {self.max_loss_fraction:.0%} allowed")
        ranges = [("in-process simulation", self.auc_simulation)]
        if self.auc_same_run is not None:
            ranges.append(("in-process run with the same plan and bins", self.auc_same_run))
        if self.auc_aggregator is not None and abs(self.auc_aggregator - self.auc) > 1e-9:
            out.append(
                f"the aggregator scored its model at AUC {self.auc_aggregator:.6f} on the held-out rows, "
                f"the demo at {self.auc:.6f}: not the same model or not the same rows"
            )
        for name, (mean, sd) in ranges:
            floor = mean - max(3 * sd, 0.02)
            if self.auc < floor:
                out.append(
                    f"the protocol's held-out AUC {self.auc:.3f} is below the {name}'s range "
                    f"({mean:.3f} ± {sd:.3f}, floor {floor:.3f})"
                )
        return out

    def explanation(self) -> str:
        """One paragraph saying the run fell short, and why (empty when :meth:`shortfalls` is)."""
        why = self.shortfalls()
        if not why:
            return ""
        return (
            f"THE PROTOCOL RUN FELL SHORT (problem {self.problem_id}): "
            + "; ".join(why)
            + ". The table above is what happened, not what AnonML computes on a healthy run; "
            "this usually means the machine was too loaded for the protocol's schedule "
            "(peers not ready in time, deliveries late). Rerun with fewer --students or on a quieter machine."
        )

    def _participations(self) -> str:
        ended = sorted(self.participations.items())
        return ", ".join(f"{n:,} {phase}" for phase, n in ended) or "not known"

    def rows(self) -> list[tuple[str, str]]:
        """``(what, value)`` lines for a two-column table."""
        mean, sd = self.auc_simulation
        eps = self.epsilon_per_peer
        rows = [
            ("students simulated (one event store each)", f"{self.students:,}"),
            ("events imported (edx importer)", f"{self.events_imported:,}"),
            ("peers in the protocol / held out for scoring", f"{self.peers:,} / {self.held_out:,}"),
            ("dropout rate", f"{self.dropout_rate:.1%}"),
            ("features", ", ".join(self.features)),
            (
                "median answers (binary randomised response)",
                f"{self.median_answers:,} of pool {self.median_pool:,}",
            ),
            ("peers' participations ended", self._participations()),
            ("tokens issued / verified at intake", f"{self.tokens_issued:,} / {self.tokens_verified:,}"),
            (
                "packets sent / given up by peers (3-hop onions, cover included)",
                f"{self.packets_sent:,} / {self.packets_not_sent:,}",
            ),
            ("packets relayed (hops processed)", f"{self.packets_relayed:,}"),
            ("transcripts co-signed by the witness (its log)", f"{self.witness_log:,}"),
            (
                "reports expected / received / lost",
                "not counted"
                if self.reports is None
                else f"{self.reports.expected:,} / {self.reports.received:,} / {self.reports.describe()}",
            ),
            (
                "relay cost per hop measured before the round",
                "not measured (windows given)"
                if self.hop_seconds is None
                else f"{self.hop_seconds * 1e3:.1f} ms",
            ),
            (
                "send / release window",
                "not known"
                if self.packet_windows is None
                else "{:.1f} s / {:.1f} s".format(*self.packet_windows),
            ),
            (
                "roster / witness / report delay (the round's fixed waits)",
                "not known"
                if not self.round_waits
                else " / ".join(
                    f"{self.round_waits[k]:.1f} s"
                    for k in ("roster_seconds", "witness_seconds", "report_delay_seconds")
                ),
            ),
            ("problem's final phase", self.phase + (f" ({self.message})" if self.message else "")),
            ("rejects at the aggregator", _counts(self.rejects)),
            ("rejects at the relays", _counts(self.relay_rejects)),
            (
                "ε per peer (ledgers: min / mean / max)",
                f"{eps['min']:.3g} / {eps['mean']:.3g} / {eps['max']:.3g} of ε = {self.epsilon:g}",
            ),
            ("held-out AUC: AnonML over the protocol", f"{self.auc:.3f}"),
            (
                "held-out AUC: as the aggregator's console scores it",
                "not scored" if self.auc_aggregator is None else f"{self.auc_aggregator:.3f}",
            ),
            ("held-out AUC: same computation simulated in-process", f"{mean:.3f} ± {sd:.3f}"),
            (
                "held-out AUC: in-process with this run's plan and bins",
                "not computed" if self.auc_same_run is None else "{:.3f} ± {:.3f}".format(*self.auc_same_run),
            ),
            ("held-out AUC: non-private logistic regression", f"{self.auc_central:.3f}"),
        ]
        rows += [(f"time: {phase}", f"{seconds:.2f} s") for phase, seconds in self.phase_seconds.items()]
        return rows


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "none"

