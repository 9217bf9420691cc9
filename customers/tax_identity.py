"""A customer's tax identity (issue 43): its country (ISO 3166 alpha-2) and VAT id, each
checked when it is stored, so :mod:`billing.vat` can decide an invoice's VAT category from
them. VAT ids are checked with python-stdnum: an EU one (and a number of a country
python-stdnum knows, e.g. CH, GB, NO) must have valid check digits and be of the
customer's country; others are kept as typed, trimmed.
"""

from __future__ import annotations

import functools

from babel import Locale
from stdnum.eu import vat as eu_vat
from stdnum.exceptions import ValidationError
from stdnum.util import get_cc_module

from config.errors import InvalidInput

# The 27 member states (ISO codes; their VAT ids start with the same code, Greece's
# with EL). Northern Ireland's XI ids are EU VAT ids for goods only: not accepted here.
EU_COUNTRIES = frozenset(
    "AT BE BG CY CZ DE DK EE ES FI FR GR HR HU IE IT LT LU LV MT NL PL PT RO SE SI SK".split()
)
VAT_PREFIX = {"GR": "EL"}


@functools.cache
def _countries() -> frozenset[str]:
    """ISO 3166 alpha-2 codes (CLDR's territories, without its private-use and grouping
    codes)."""
    codes = {code for code in Locale("en").territories if len(code) == 2 and code.isalpha()}
    return frozenset(codes - {"EU", "EZ", "UN", "ZZ", "QO", "XA", "XB", "XK"})


def country_name(code: str) -> str:
    return Locale("en").territories.get(code, code)


def check_country(value: str) -> str:
    """An ISO 3166 alpha-2 code, upper-cased; empty stays empty."""
    code = value.strip().upper()
    if code and code not in _countries():
        raise InvalidInput(
            f"country must be an ISO 3166 alpha-2 code (DE, FR, US...), not {value!r}"
        )
    return code


def check_vat_id(value: str, *, country: str) -> str:
    """The VAT id compacted (spaces, dots, dashes dropped), checked with python-stdnum;
    empty stays empty. An EU id needs an EU ``country`` it belongs to."""
    text = value.strip()
    if not text:
        return ""
    if country in EU_COUNTRIES:
        compact = eu_vat.compact(text)
        if not compact[:2].isalpha():
            compact = VAT_PREFIX.get(country, country) + compact
        if not eu_vat.is_valid(compact):
            raise InvalidInput(
                f"vat_id {text!r} is not a valid EU VAT id (country prefix and check digits)"
            )
        if compact[:2] != VAT_PREFIX.get(country, country):
            raise InvalidInput(f"vat_id {compact} is not of the customer's country {country}")
        return compact
    if not country:
        raise InvalidInput("a VAT id needs the customer's country (country)")
    module = get_cc_module(country.lower(), "vat")
    if module is None:
        return " ".join(text.split())
    try:
        return module.validate(text)
    except ValidationError:
        raise InvalidInput(f"vat_id {text!r} is not a valid {country} VAT number") from None
