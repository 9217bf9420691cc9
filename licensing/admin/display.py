"""How the console shows a batch, a licence and its state."""

from __future__ import annotations

from django.template.loader import render_to_string
from django.utils.html import format_html

from config.admin.display import admin_url, utc_time
from licensing.models import (
    License,
    is_near_exhaustion,
)
from licensing.unit_states import UnitState


def progress_bar(*, activated: int, purchased: int, what: str = "units activated"):
    """A bar of the units activated out of those purchased (or ``what`` else used of an
    allowance), red near exhaustion, then ``9/10`` (``1,500/20,000``); it never wraps."""
    share = activated / purchased if purchased else 0
    near = is_near_exhaustion(activated=activated, purchased=purchased)
    colour = "#ba2121" if near else "#417690"
    # An SVG, its share and colour as attributes: the Content-Security-Policy allows no
    # style attribute. The count after it is red near exhaustion (.near-exhaustion).
    return format_html(
        '<span class="svc-progress{}" title="{} of {} {}">'
        '<svg class="svc-progress-bar" viewBox="0 0 100 10" preserveAspectRatio="none" '
        'aria-hidden="true"><rect width="100" height="10" fill="#ddd"></rect>'
        '<rect width="{}" height="10" fill="{}"></rect></svg>'
        ' <span class="svc-progress-count">{}</span></span>',
        " near-exhaustion" if near else "",
        f"{activated:,}",
        f"{purchased:,}",
        what,
        f"{min(share, 1) * 100:.0f}",
        colour,
        f"{activated:,}/{purchased:,}",
    )


def copyable(text: str, *, element_id: str):
    """A read-only box of ``text`` and a Copy button (static/svc/console.js copies the box
    its data-copy names: no inline script)."""
    return format_html(
        '<textarea id="{}" class="svc-token" readonly rows="4">{}</textarea><br>'
        '<button type="button" class="button" data-copy="{}">Copy</button>',
        element_id,
        text,
        element_id,
    )


def revoked_or_valid(lic: License, *, full: bool = False):
    """The licence's revocation: "valid", or "revoked" in red with when and why as a
    tooltip (``full``: also written out after it)."""
    if lic.revoked_at is None:
        return "valid"
    why = f"{utc_time(lic.revoked_at)}: {lic.revoke_reason or 'no reason given'}"
    return format_html(
        '<span class="svc-red" title="{}">revoked</span>{}', why, f" {why}" if full else ""
    )


def admin_link(obj, label: str | None = None):
    if obj is None:
        return "-"
    opts = obj._meta
    url = admin_url(f"{opts.app_label}_{opts.model_name}_change", obj.pk)
    return format_html('<a href="{}">{}</a>', url, label or obj.pk)


def unit_state_badge(state: UnitState):
    """A unit's state in the one component the portal includes too
    (templates/_unit_state.html)."""
    return render_to_string("_unit_state.html", {"state": state})
