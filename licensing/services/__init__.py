"""Every write of the licensing authority, by noun; this index names each one, and
callers import from here (``from licensing.services import batch_issue``):

- licences and batches (:mod:`.licenses`): ``batch_issue``, ``license_issue``,
  ``license_revoke``, ``license_register`` (an offline-minted licence),
  ``catalogue_seed``;
- activation (:mod:`.activation`): ``unit_activate``, a batch key exchanged for a unit
  licence, the billing event;
- renewals (:mod:`.renewals`): ``license_renew``, ``license_refresh`` (a device's
  licence re-signed to its batch's new end);
- seats (:mod:`.seats`): ``seat_release`` (a dead or replaced camera's seat);
- last seen (:mod:`.seen`): ``unit_seen``, a unit's last status fetch, usage upload or
  re-activation, written at most once per ``SVC_LAST_SEEN_MINUTES``;
- holds (:mod:`.holds`): ``license_suspend``, ``license_reinstate`` (a reversible hold
  on a licence, a batch key or a customer, issue 42);
- add-ons (:mod:`.addons`): ``addon_add``, ``addon_remove`` (a catalogue add-on sold
  for a batch or a direct licence after the sale, or ended, issue 42).
- trials (:mod:`.trials`): ``trial_convert``, a trial batch made paid (issue 42), and
  ``trial_conversion_quote``, what that would do now.

The signing keys' writes are :mod:`signing.services`; :mod:`.keys` registers with it
what a key's change does to the revocation list.

Only writes (and what they return) are named here; the helpers they share stay in their
modules. Reads are in :mod:`licensing.selectors`; the revocation list's documents in
:mod:`licensing.revocations`.
"""

from licensing.services.activation import ActivationResult, unit_activate
from licensing.services.addons import AddOnChange, addon_add, addon_remove
from licensing.services.holds import Hold, license_reinstate, license_suspend
from licensing.services.licenses import (
    batch_issue,
    catalogue_seed,
    license_issue,
    license_register,
    license_revoke,
)
from licensing.services.renewals import (
    RefreshResult,
    RenewalResult,
    license_refresh,
    license_renew,
    renewal_quote,
)
from licensing.services.seats import ReleasePolicy, ReleaseResult, seat_release
from licensing.services.seen import unit_seen
from licensing.services.trials import (
    ConversionQuote,
    ConversionResult,
    trial_conversion_quote,
    trial_convert,
)

__all__ = [
    "ActivationResult",
    "AddOnChange",
    "ConversionQuote",
    "ConversionResult",
    "Hold",
    "addon_add",
    "addon_remove",
    "RefreshResult",
    "ReleasePolicy",
    "ReleaseResult",
    "RenewalResult",
    "batch_issue",
    "catalogue_seed",
    "license_issue",
    "license_refresh",
    "license_register",
    "license_reinstate",
    "license_renew",
    "license_revoke",
    "license_suspend",
    "renewal_quote",
    "seat_release",
    "trial_conversion_quote",
    "trial_convert",
    "unit_activate",
    "unit_seen",
]
