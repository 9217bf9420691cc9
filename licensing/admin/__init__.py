"""Catalogue, batches, licences and the fleet in the operator console, one module per
noun (catalogue, batches, licenses, fleet, keys, trials; their shared display, forms and
the revoke-with-reason action); importing this package registers them.

Batches and licences are issued and revoked through the services the API uses
(``batch_issue``, ``license_issue``, ``license_revoke``); no admin page saves them
directly. The signing key never reaches the database, so no page can show it; tokens
are shown (with a copy button) because an operator sends them to customers. Signing keys
(public halves and certificates) are listed read-only and retired or revoked through
``signing_key_retire`` / ``signing_key_revoke``.
"""

from licensing.admin import (  # noqa: F401 - registers
    batches,
    catalogue,
    fleet,
    identity,
    keys,
    licenses,
    trials,
)
