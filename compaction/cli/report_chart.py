"""A horizontal bar chart of bytes before and after, per topic, as inline SVG markup.

Drawn here rather than by a charting library so the HTML report stays one file with no script and
nothing fetched: it must open from an archive or an air-gapped host.
"""

from __future__ import annotations

from html import escape

BEFORE_FILL = "#9fb3c8"  # the tests look for these exact colours in a screenshot
AFTER_FILL = "#1f6feb"
MAX_BARS = 40  # topics drawn; more would make a chart no one reads (the table below lists them all)
LABEL_CHARS = 26

_WIDTH, _LABEL_W, _VALUE_W = 960, 210, 150
_BAR_H, _PAIR_GAP, _GROUP_GAP, _TOP, _BOTTOM = 14, 3, 16, 10, 28
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as the console table's MiB)."""
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{int(value)} B" if unit == 0 else f"{value:,.1f} {_UNITS[unit]}"


def _tick_label(n: int) -> str:
    return human_bytes(n).replace(".0 ", " ")  # round ticks: "50 MiB", not "50.0 MiB"


def _short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "\u2026"


def _bar(x: float, y: float, width: float, fill: str, tip: str) -> str:
    # Whole pixels and crisp edges: the fill colour then reaches the screen unblended.
    return (
        f'<rect x="{x:.0f}" y="{y:.0f}" width="{max(width, 0):.0f}" height="{_BAR_H}" fill="{fill}">'
        f"<title>{escape(tip)}</title></rect>"
    )


def axis_ticks(peak: int) -> list[int]:
    """Round tick values from 0 to at least `peak`, a round step in the unit the labels use (the
    axis reads 0, 25 MiB, 50 MiB, not 0, 26.7 MiB, ...)."""
    if peak <= 0:
        return [0]
    unit = 1
    while peak / unit >= 1024 and unit < 1024 ** (len(_UNITS) - 1):
        unit *= 1024
    raw, magnitude = peak / unit / 5, 1.0
    while magnitude * 10 <= raw:
        magnitude *= 10
    while magnitude > raw:
        magnitude /= 10
    step = max(1, round(next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw) * unit))
    return [i * step for i in range(-(-peak // step) + 1)]


def _grid(ticks: list[int], scale: float, top: float, bottom: float) -> list[str]:
    out = []
    for value in ticks:
        x = _LABEL_W + (value / ticks[-1] * scale if ticks[-1] else 0)
        out.append(f'<line x1="{x:.0f}" y1="{top:.0f}" x2="{x:.0f}" y2="{bottom:.0f}" class="grid"/>')
        label = escape(_tick_label(value))
        out.append(f'<text x="{x:.0f}" y="{bottom + 16:.0f}" class="tick">{label}</text>')
    return out


def _pair(y: int, label: str, before: int, after: int, axis_max: int, scale: float) -> list[str]:
    """A topic's label and its two bars, from the top `y`."""
    pair_h = 2 * _BAR_H + _PAIR_GAP
    out = [
        f'<text x="{_LABEL_W - 10}" y="{y + pair_h / 2 + 4:.0f}" class="label">'
        f"<title>{escape(label)}</title>{escape(_short(label))}</text>"
    ]
    bars = ((before, BEFORE_FILL, "before"), (after, AFTER_FILL, "after"))
    for row, (value, fill, word) in enumerate(bars):
        top = y + row * (_BAR_H + _PAIR_GAP)
        width = value / axis_max * scale if axis_max else 0
        out.append(_bar(_LABEL_W, top, width, fill, f"{label}: {word} {value:,} bytes"))
        out.append(
            f'<text x="{_LABEL_W + width + 6:.0f}" y="{top + _BAR_H - 3}" class="value">'
            f"{escape(human_bytes(value))}</text>"
        )
    return out


def bar_chart(groups: list[tuple[str, int, int]]) -> str:
    """An `<svg>` with a pair of bars (before, after) per `(label, before, after)` on one byte
    axis; at most `MAX_BARS` groups, in the order given."""
    groups = groups[:MAX_BARS]
    ticks = axis_ticks(max((max(b, a) for _, b, a in groups), default=0))
    step = 2 * _BAR_H + _PAIR_GAP + _GROUP_GAP
    height = _TOP + len(groups) * step + _BOTTOM
    scale = _WIDTH - _LABEL_W - _VALUE_W
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {_WIDTH} {height}" width="{_WIDTH}" '
        f'height="{height}" shape-rendering="crispEdges" '
        'aria-label="log bytes before and after per topic">'
    ]
    parts += _grid(ticks, scale, _TOP - 4, height - _BOTTOM + 2)
    for i, (label, before, after) in enumerate(groups):
        parts += _pair(_TOP + i * step, label, before, after, ticks[-1], scale)
    parts.append("</svg>")
    return "\n".join(parts)
