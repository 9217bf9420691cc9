"""The /v1 views of the licensing authority, one module per resource: ``devices`` (what
cameras call), ``licenses`` (catalogue, batches, licences, revocation, seats), ``fleet``
(activation records, their CSV, terms ending soon), ``renewals`` and ``trials``
(converting a trial batch). One view per
operation: parse, call one service, render. Errors are raised, never caught here."""
