"""The console's Propose form: fields in, a :class:`~anonml.protocol.ProblemDraft` (or what is wrong) out.

The form asks for what an operator decides — title, description, the
instancer and featurizer (installed plugins, by name, with their parameters
as JSON), which of the featurizer's declared features to use (their public
ranges as the featurizer declares them), ε, bins per numeric feature, k_p,
hops, the fewest peers, how long registration stays open, admission and the
witnesses — and builds the draft's JSON from them; everything else keeps the
schema's defaults (the raw JSON box on the same page sets any field). The
draft is validated by the schema itself, and each error is put beside the
field it is about (:data:`FIELD_OF`). The same check answers the page's
as-you-type requests, so the browser and the server never disagree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from anonml.model import FeatureSpec
from anonml.plugins import iter_classes
from anonml.protocol import ProblemDraft
from anonml.web import epsilon_sentence

__all__ = ["FIELDS", "FIELD_OF", "ProposeCheck", "check_form", "form_of_draft", "installed", "features_of"]

#: The form's fields (besides one ``feature.<name>`` checkbox per offered feature).
FIELDS = (
    "title", "description", "instancer", "instancer_params", "featurizer", "featurizer_params",
    "epsilon", "bins", "kp", "hops", "min_peers", "registration_minutes", "admission", "issuer", "scope",
    "witnesses",
)
#: The form field a schema error's first location names (the rest go above the form).
FIELD_OF = {
    "title": "title", "description": "description", "instancer": "instancer_params",
    "featurizer": "featurizer_params", "features": "features", "epsilon": "epsilon", "bins": "bins",
    "kp": "kp", "hops": "hops", "min_peers": "min_peers", "schedule": "registration_minutes",
    "admission": "admission", "witnesses": "witnesses", "median": "epsilon",
}
_NUMBERS = {"epsilon": float, "bins": int, "kp": int, "hops": int, "min_peers": int,
            "registration_minutes": float}


def installed(kind: str) -> list[str]:
    """The names of the installed plugins of ``kind`` that load."""
    return sorted({cls.name for cls in iter_classes(kind)})


def features_of(featurizer: str, params: dict[str, Any]) -> list[FeatureSpec]:
    """The features the installed ``featurizer`` declares with ``params`` (none if it does not load)."""
    for cls in iter_classes("featurizer"):
        if cls.name == featurizer:
            try:
                return list(cls(params).features())
            except Exception:  # bad params: the schema check names them beside their field
                return []
    return []


@dataclass
class ProposeCheck:
    """The outcome of a form: the draft when valid, else the errors by field; the ε sentence."""

    values: dict[str, str]
    offered: list[FeatureSpec]
    chosen: list[str]
    draft: ProblemDraft | None = None
    errors: dict[str, list[str]] = field(default_factory=dict)
    sentence: str = ""
    text: str = ""  # the draft's JSON (what the fields make), once it parses

    def error(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def to_json(self) -> dict[str, Any]:
        """What the page's as-you-type check reads (text only)."""
        return {"ok": self.draft is not None, "errors": self.errors, "sentence": self.sentence,
                "json": self.text, "features": [f.name for f in self.offered]}


def _json_object(check: ProposeCheck, name: str) -> dict[str, Any]:
    text = check.values.get(name, "").strip() or "{}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        check.error(name, f"not JSON: {exc.msg} at character {exc.pos}")
        return {}
    if not isinstance(value, dict):
        check.error(name, "must be a JSON object of parameters, e.g. {\"weeks\": 2}")
        return {}
    return value


def _witnesses(check: ProposeCheck) -> list[dict[str, str]]:
    out = []
    for n, line in enumerate(check.values.get("witnesses", "").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            check.error("witnesses", f"line {n}: write the witness's identity (base64) and its URL")
            continue
        out.append({"identity": parts[0], "url": parts[1]})
    return out


def check_form(form: dict[str, str], now: datetime | None = None) -> ProposeCheck:
    """Build and validate the draft the form describes (never publishes anything)."""
    now = now or datetime.now(UTC)
    values = {name: form.get(name, "") for name in FIELDS}
    check = ProposeCheck(values, [], [])
    numbers: dict[str, float | int] = {}
    for name, kind in _NUMBERS.items():
        text = values[name].strip()
        try:
            numbers[name] = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            check.error(name, f"must be {what}, not {text[:20]!r}" if text else f"must be {what}")
    instancer_params = _json_object(check, "instancer_params")
    featurizer_params = _json_object(check, "featurizer_params")
    check.offered = features_of(values["featurizer"], featurizer_params)
    check.chosen = [f.name for f in check.offered if form.get(f"feature.{f.name}") == "on"]
    if values["featurizer"] and not check.offered and "featurizer_params" not in check.errors:
        check.error("featurizer", f"no installed featurizer {values['featurizer'][:60]!r} declares features")
    elif not check.chosen:
        check.error("features", "choose at least one feature")
    epsilon = numbers.get("epsilon")
    if isinstance(epsilon, float) and 0 < epsilon <= 20:
        check.sentence = epsilon_sentence(epsilon)
    witnesses = _witnesses(check)
    if check.errors:
        return check
    admission: dict[str, Any] = {"mode": values["admission"] or "open"}
    if admission["mode"] == "credentials":
        admission |= {"issuer": values["issuer"].strip() or None, "scope": values["scope"].strip()}
    body = {
        "title": values["title"],
        "description": values["description"],
        "instancer": {"name": values["instancer"], "params": instancer_params},
        "featurizer": {"name": values["featurizer"], "params": featurizer_params},
        "features": [f.model_dump(mode="json") for f in check.offered if f.name in check.chosen],
        "epsilon": numbers["epsilon"],
        "bins": numbers["bins"],
        "kp": numbers["kp"],
        "hops": numbers["hops"],
        "min_peers": numbers["min_peers"],
        "schedule": {
            "registration_deadline": (now + timedelta(minutes=float(numbers["registration_minutes"])))
            .isoformat()
        },
        "admission": admission,
        "witnesses": witnesses,
    }
    try:
        check.draft = ProblemDraft.model_validate(body)
    except ValidationError as exc:
        for e in exc.errors(include_url=False):
            loc = [str(x) for x in e["loc"]]
            name = FIELD_OF.get(loc[0], "") if loc else ""
            where = ".".join(loc[1:]) if name and len(loc) > 1 else ".".join(loc)
            check.error(name or "draft", f"{where + ': ' if where else ''}{e['msg']}")
        return check
    check.text = check.draft.model_dump_json(indent=2)
    return check


def form_of_draft(draft: ProblemDraft, now: datetime | None = None) -> dict[str, str]:
    """The form's fields filled from ``draft`` (the page's starting point)."""
    now = now or datetime.now(UTC)
    minutes = max(0.0, (draft.schedule.registration_deadline - now).total_seconds() / 60)
    form = {
        "title": draft.title, "description": draft.description,
        "instancer": draft.instancer.name, "instancer_params": json.dumps(dict(draft.instancer.params)),
        "featurizer": draft.featurizer.name, "featurizer_params": json.dumps(dict(draft.featurizer.params)),
        "epsilon": f"{draft.epsilon:g}", "bins": str(draft.bins), "kp": str(draft.kp),
        "hops": str(draft.hops),
        "min_peers": str(draft.min_peers), "registration_minutes": f"{round(minutes):g}",
        "admission": draft.admission.mode,
        "issuer": "" if draft.admission.issuer is None else _b64(draft.admission.issuer),
        "scope": draft.admission.scope,
        "witnesses": "\n".join(f"{_b64(w.identity)} {w.url}" for w in draft.witnesses),
    }
    for f in draft.features:
        form[f"feature.{f.name}"] = "on"
    return form


def _b64(raw: bytes) -> str:
    import base64

    return base64.b64encode(bytes(raw)).decode("ascii")
