"""``{{ licence|unit_state }}``: a unit's state in the one component
(templates/_unit_state.html) on any console or portal page that holds the licence row
(its ``seat_release`` selected with it)."""

from __future__ import annotations

from django import template
from django.template.loader import render_to_string

from licensing.unit_states import unit_state_of

register = template.Library()


@register.filter
def unit_state(lic) -> str:
    return render_to_string("_unit_state.html", {"state": unit_state_of(lic)})
