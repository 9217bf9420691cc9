"""Every write of billing, by the noun it acts on. The rules live in the modules named
after them; this module is the index the API, the admin, the console and the
management commands import from.

* :mod:`billing.ingestion` - usage upload (``usage_ingest``, contract §7)
* :mod:`billing.rating` - invoice lines of a window or of a ledger period (contract §6)
* :mod:`billing.issuing` - invoices over contiguous periods (:mod:`billing.periods`)
* :mod:`billing.credit_notes` - credit notes of a whole invoice or of chosen lines
* :mod:`billing.ledger` - which issued invoice billed which event (exactly once)
* :mod:`billing.partitions` - monthly partitions of usage records, pruning
* :mod:`billing.reconciliation` - stored ledger checks (``ledger_check_run``)
* :mod:`billing.limits` - limits and day arithmetic, defined once
"""

from __future__ import annotations

from billing.credit_notes import (
    AlreadyCredited,
    CreditExceedsBilled,
    credit_note_draft,
    credit_note_issue,
    line_credits,
)
from billing.documents import SellerNotSet
from billing.ingestion import usage_ingest
from billing.issuing import (
    NothingToInvoice,
    TotalChanged,
    customer_currencies,
    invoice_draft,
    invoice_issue,
    invoice_issue_all,
)
from billing.periods import InvoiceAlreadyIssued, InvoiceNotDue, PeriodNotOver
from billing.rating import invoice_rate
from billing.reconciliation import ledger_check_run

__all__ = [
    "AlreadyCredited",
    "CreditExceedsBilled",
    "line_credits",
    "InvoiceAlreadyIssued",
    "InvoiceNotDue",
    "NothingToInvoice",
    "PeriodNotOver",
    "SellerNotSet",
    "TotalChanged",
    "credit_note_draft",
    "credit_note_issue",
    "customer_currencies",
    "invoice_draft",
    "invoice_issue",
    "invoice_issue_all",
    "invoice_rate",
    "ledger_check_run",
    "usage_ingest",
]
