"""Charts as inline SVG, rendered on the server: no JavaScript, no CDN, no network."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from svccore import dates

BAR = "#417690"
AXIS = "#666"
GRID = "#ddd"
# Width of a character of an 11 px label, a little over the average of the sans-serif
# faces browsers use; labels are sized and shortened by it, as the server cannot measure.
CHAR_WIDTH = 6.8


def _nice_max(value: float) -> int:
    """The smallest 1/2/5 x 10^n at or above ``value`` (at least 1), for the axis top."""
    if value <= 1:
        return 1
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _short(number: int) -> str:
    for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if number >= size:
            return f"{number / size:.3g}{suffix}"
    return str(number)


def day_columns(
    points: Sequence[tuple[dt.date, int]], *, title: str, width: int = 540, height: int = 200
) -> SafeString:
    """A column per day; every column has a tooltip with the exact count."""
    left, right, top, bottom = 48, 24, 24, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = _nice_max(max((v for _, v in points), default=0))
    slot = plot_w / max(len(points), 1)
    columns = []
    for index, (day, value) in enumerate(points):
        h = plot_h * value / top_value
        x = left + index * slot + slot * 0.15
        columns.append(
            (
                f"{x:.1f}",
                f"{top + plot_h - h:.1f}",
                f"{slot * 0.7:.1f}",
                f"{h:.1f}",
                BAR,
                f"{dates.day(day)}: {value}",
            )
        )
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
        columns,
    )
    labels = format_html_join(
        "",
        '<text x="{}" y="{}" font-size="10" text-anchor="middle" fill="{}">{}</text>',
        (
            (f"{left + i * slot + slot / 2:.1f}", height - 10, AXIS, dates.day_month(day))
            for i, (day, _) in enumerate(points)
            if i % max(1, len(points) // 6) == 0 or i == len(points) - 1
        ),
    )
    gridlines = format_html_join(
        "",
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}"/>'
        '<text x="{}" y="{}" font-size="10" text-anchor="end" fill="{}">{}</text>',
        (
            (
                left,
                width - right,
                f"{top + plot_h * (1 - f):.1f}",
                f"{top + plot_h * (1 - f):.1f}",
                GRID,
                left - 4,
                f"{top + plot_h * (1 - f) + 3:.1f}",
                AXIS,
                _short(int(top_value * f)),
            )
            for f in ((0, 1) if top_value < 2 else (0, 0.5, 1))
        ),
    )
    return format_html(
        '<svg class="svc-chart" role="img" '
        'aria-label="{}" width="{}" height="{}" viewBox="0 0 {} {}">'
        '<text x="{}" y="14" font-size="12" font-weight="bold" fill="#333">{}</text>'
        "{}{}{}</svg>",
        title,
        width,
        height,
        width,
        height,
        left,
        title,
        gridlines,
        bars,
        labels,
    )


def _fit(label: str, chars: int) -> str:
    return label if len(label) <= chars else label[: max(chars - 1, 1)].rstrip() + "\u2026"


def horizontal_bars(
    rows: Sequence[tuple[str, int]],
    *,
    title: str,
    width: int = 640,
    row_height: int = 22,
    tooltips: Sequence[str] = (),
) -> SafeString:
    """One labelled bar per row, longest first as given. The label column is as wide as
    the longest label, up to 45% of the chart; a longer label is shortened with an
    ellipsis. Each bar's tooltip is ``tooltips[i]`` (default: the whole label)."""
    longest = max((len(label) for label, _ in rows), default=0)
    needed, widest = int(longest * CHAR_WIDTH) + 13, int(width * 0.45)
    label_w = min(needed, widest)
    chars = longest if needed <= widest else int((widest - 12) / CHAR_WIDTH)
    value_w, top = 64, 24
    height = top + row_height * max(len(rows), 1) + 8
    plot_w = width - label_w - value_w
    top_value = max((v for _, v in rows), default=0) or 1
    items = format_html_join(
        "",
        '<text x="{}" y="{}" font-size="11" text-anchor="end" fill="#333">{}<title>{}</title>'
        '</text><rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}: {}</title></rect>'
        '<text x="{}" y="{}" font-size="11" fill="{}">{}</text>',
        (
            (
                label_w - 6,
                top + i * row_height + row_height * 0.65,
                _fit(label, chars),
                tooltips[i] if i < len(tooltips) else label,
                label_w,
                top + i * row_height + 3,
                f"{max(plot_w * value / top_value, 1):.1f}",
                row_height - 6,
                BAR,
                tooltips[i] if i < len(tooltips) else label,
                f"{value:,}",
                f"{label_w + max(plot_w * value / top_value, 1) + 4:.1f}",
                top + i * row_height + row_height * 0.65,
                AXIS,
                _short(value),
            )
            for i, (label, value) in enumerate(rows)
        ),
    )
    empty = (
        format_html(
            '<text x="{}" y="{}" font-size="11" fill="{}">no usage in this period</text>',
            0,
            top + 14,
            AXIS,
        )
        if not rows
        else ""
    )
    return format_html(
        '<svg class="svc-chart" role="img" '
        'aria-label="{}" width="{}" height="{}" viewBox="0 0 {} {}">'
        '<text x="0" y="14" font-size="12" font-weight="bold" fill="#333">{}</text>{}{}</svg>',
        title,
        width,
        height,
        width,
        height,
        title,
        items,
        empty,
    )
