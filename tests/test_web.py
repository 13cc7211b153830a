"""The pages' shared pieces: SVG charts (escaped labels, scales), ε in a sentence, form reading."""

from __future__ import annotations

import asyncio
import math
import re

import pytest
from fastapi import HTTPException
from starlette.requests import Request

from anonml.web import Series, epsilon_sentence, read_form, svg_step_chart, svg_timeline


def test_a_step_chart_scales_to_its_points_and_cap_and_escapes_every_label():
    chart = str(
        svg_step_chart(
            [Series("<b>p-1</b>", ((0.0, 1.0), (2.0, 3.0))), Series("p-2", ((1.0, 0.5),))],
            cap=10.0,
            cap_label="cap <10>",
            x_label="x & y",
            y_label='"ε"',
        )
    )
    assert "<b>" not in chart and "&lt;b&gt;p-1&lt;/b&gt;" in chart and "cap &lt;10&gt;" in chart
    assert "x &amp; y" in chart and "&#34;ε&#34;" in chart
    assert chart.count("<path ") == 2 and 'stroke-dasharray="6 4"' in chart  # two series, one cap line
    # The y axis covers the cap with 10 % headroom: the cap sits at 1/1.1 of the plot height.
    top, bottom = 12, 260 - 38
    (cap_y,) = {float(y) for y in re.findall(r'y1="([\d.]+)"[^>]*stroke="#c00"', chart)}
    assert math.isclose(cap_y, bottom - 10 / 11 * (bottom - top), abs_tol=0.1)
    assert ">0</text>" in chart and ">2</text>" in chart  # x ticks from the first to the last point
    assert str(svg_step_chart([])) == '<p class="muted">Nothing to chart yet.</p>'


def test_a_timeline_gives_each_phase_its_share_of_the_width():
    svg = str(svg_timeline([("registration", 3.0), ("<reporting>", 1.0)], width=400))
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="4" width="([\d.]+)"', svg)]
    assert widths == [300.0, 100.0]
    assert "&lt;reporting&gt;" in svg and "<reporting>" not in svg
    assert "No phase" in str(svg_timeline([("registration", 0.0)]))


def test_epsilon_in_a_sentence_states_the_likelihood_ratio_bound():
    assert "at most 2.72 times (e^1)" in epsilon_sentence(1.0)
    assert "at most 1.11 times (e^0.1)" in epsilon_sentence(0.1)


def _request(body: bytes, content_type: str | None) -> Request:
    headers = [] if content_type is None else [(b"content-type", content_type.encode())]
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)


def test_forms_are_urlencoded_bounded_and_each_field_given_once():
    form = "application/x-www-form-urlencoded"
    assert asyncio.run(read_form(_request(b"a=1&b=%3Cx%3E&c=", form))) == {"a": "1", "b": "<x>", "c": ""}
    assert asyncio.run(read_form(_request(b"", None))) == {}
    for body, kind, status in (
        (b'{"a": 1}', "application/json", 415),
        (b"a=1&a=2", form, 400),
        (b"a=" + b"x" * 70_000, form, 413),
        (b"a=\xff", form, 400),
    ):
        with pytest.raises(HTTPException) as refused:
            asyncio.run(read_form(_request(body, kind)))
        assert refused.value.status_code == status, body[:20]


def test_pages_and_commands_strip_the_same_characters_and_paths_break_at_separators():
    from markupsafe import Markup

    from anonml.cli_support import untrusted
    from anonml.text import strip_controls
    from anonml.web import _inert, _path

    hostile = "\u202eexe.elif_tnedutS\u2066x\u2069\u200b\x1b[31mred\x1b[0m\x07\nnext"
    assert strip_controls(hostile) == "exe.elif_tnedutSxred\nnext"
    assert untrusted(hostile) == "exe.elif_tnedutSxred next"  # the command's output: one line
    assert _inert(hostile) == strip_controls(hostile) and _inert(3) == 3
    chart = _inert(Markup("<svg><text>\u202ep-1</text></svg>"))
    assert isinstance(chart, Markup) and str(chart) == "<svg><text>p-1</text></svg>"
    assert str(_path("/home/<me>/a\\b\u202e.log")) == "/<wbr>home/<wbr>&lt;me&gt;/<wbr>a\\<wbr>b.log"
