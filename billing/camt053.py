"""A bank-to-customer statement (ISO 20022 CAMT.053, the XML EU banks export) read into
its booked credit entries: amount, currency, date, the bank's references and the
remittance information that may name invoices.

Versions ``camt.053.001.02`` to ``.08`` are accepted (the elements read here are the same
in all of them, but for the entry status, a code of its own from .06 on). The file comes
from outside, so it is parsed with no DTD, no entities and no network (lxml with
``resolve_entities=False``, ``no_network=True``, ``load_dtd=False``, ``huge_tree=False``);
a file with a DOCTYPE is refused whole, as is one over :data:`MAX_BYTES`. Every problem is
a :class:`StatementError` naming it, never another exception.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from lxml import etree

MAX_BYTES = 10 * 1024 * 1024
NAMESPACES = {f"urn:iso:std:iso:20022:tech:xsd:camt.053.001.{v:02d}" for v in range(2, 9)}
INVOICE_NUMBER = re.compile(r"INV-(\d{4})-(\d{6})(?!\d)", re.IGNORECASE)
ENTRIES_MAX = 100_000


class StatementError(ValueError):
    """The file is not a CAMT.053 statement this reader takes; the message says why."""


@dataclass
class Entry:
    """One booked credit: what was paid, when, the bank's id of it (for importing it
    once) and the texts that may name what it pays."""

    entry_id: str
    amount: Decimal
    currency: str
    booked_on: dt.date
    references: list[str] = field(default_factory=list)
    remittance: list[str] = field(default_factory=list)
    debtor: str = ""

    def invoice_numbers(self) -> list[str]:
        """The invoice numbers the remittance names, in order, each once (a number may be
        split over two unstructured lines)."""
        found: list[str] = []
        texts = [*self.remittance, "".join(self.remittance)]
        for text in texts:
            for year, seq in INVOICE_NUMBER.findall(text):
                number = f"INV-{year}-{seq}"
                if number not in found:
                    found.append(number)
        return found


@dataclass
class Statement:
    statement_id: str
    account: str
    entries: list[Entry]
    skipped: int  # debits, and entries not booked


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def _text(node, path: str, ns: dict[str, str]) -> str:
    found = node.find(path, ns)
    return (found.text or "").strip() if found is not None and found.text else ""


def _date(node, ns: dict[str, str]) -> dt.date | None:
    """``Dt`` or ``DtTm`` of a date element (booking or value date)."""
    if node is None:
        return None
    text = _text(node, "c:Dt", ns)
    if text:
        try:
            return dt.date.fromisoformat(text[:10])
        except ValueError:
            raise StatementError(f"date {text[:30]!r} is not a YYYY-MM-DD date") from None
    text = _text(node, "c:DtTm", ns)
    if text:
        try:
            return dt.date.fromisoformat(text[:10])
        except ValueError:
            raise StatementError(f"date-time {text[:40]!r} is not an ISO date-time") from None
    return None


def _amount(node, where: str) -> tuple[Decimal, str]:
    if node is None or not (node.text or "").strip():
        raise StatementError(f"{where} has no amount (Amt)")
    text = node.text.strip()
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise StatementError(f"{where}: amount {text[:30]!r} is not a number") from None
    if not value.is_finite() or value <= 0 or value.as_tuple().exponent < -5:
        raise StatementError(f"{where}: amount {text[:30]!r} is not a positive amount")
    if value >= Decimal("1e15"):
        raise StatementError(f"{where}: amount {value} is too large")
    currency = (node.get("Ccy") or "").strip().upper()
    if not re.fullmatch(r"[A-Z]{3}", currency):
        raise StatementError(f"{where}: amount without a currency (Ccy)")
    return value, currency


def _booked(entry, ns: dict[str, str]) -> bool:
    status = _text(entry, "c:Sts/c:Cd", ns) or _text(entry, "c:Sts", ns)
    return status.upper() == "BOOK"


def _remittance(node, ns: dict[str, str]) -> list[str]:
    texts = [(u.text or "").strip() for u in node.iterfind(".//c:RmtInf/c:Ustrd", ns)]
    texts += [
        (r.text or "").strip() for r in node.iterfind(".//c:RmtInf/c:Strd/c:CdtrRefInf/c:Ref", ns)
    ]
    texts += [
        (r.text or "").strip() for r in node.iterfind(".//c:RmtInf/c:Strd/c:RfrdDocInf/c:Nb", ns)
    ]
    return [text[:500] for text in texts if text]


def _debtor(node, ns: dict[str, str]) -> str:
    return (
        _text(node, ".//c:RltdPties/c:Dbtr/c:Nm", ns)
        or _text(node, ".//c:RltdPties/c:Dbtr/c:Pty/c:Nm", ns)
    )[:140]


def _tx_references(tx, ns: dict[str, str]) -> list[str]:
    refs = []
    for name in ("AcctSvcrRef", "TxId", "EndToEndId"):
        value = _text(tx, f"c:Refs/c:{name}", ns)
        if value and value.upper() != "NOTPROVIDED":
            refs.append(value)
    return refs


def _entries(statement, ns: dict[str, str], statement_id: str) -> tuple[list[Entry], int]:
    entries: list[Entry] = []
    skipped = 0
    for position, node in enumerate(statement.iterfind("c:Ntry", ns), start=1):
        if position > ENTRIES_MAX:
            raise StatementError(f"over {ENTRIES_MAX:,} entries in one statement")
        where = f"entry {position}"
        direction = _text(node, "c:CdtDbtInd", ns).upper()
        if direction not in ("CRDT", "DBIT"):
            raise StatementError(f"{where}: CdtDbtInd is {direction[:10]!r}, not CRDT or DBIT")
        if direction != "CRDT" or not _booked(node, ns):
            skipped += 1
            continue
        amount, currency = _amount(node.find("c:Amt", ns), where)
        booked_on = _date(node.find("c:BookgDt", ns), ns) or _date(node.find("c:ValDt", ns), ns)
        if booked_on is None:
            raise StatementError(f"{where}: neither a booking date nor a value date")
        entry_refs = [
            value
            for value in (_text(node, "c:AcctSvcrRef", ns), _text(node, "c:NtryRef", ns))
            if value and value.upper() != "NOTPROVIDED"
        ]
        details = list(node.iterfind("c:NtryDtls/c:TxDtls", ns))
        split = len(details) > 1 and all(
            tx.find("c:Amt", ns) is not None or tx.find("c:AmtDtls/c:TxAmt/c:Amt", ns) is not None
            for tx in details
        )
        if split:  # a batch booking: each transaction pays on its own
            for index, tx in enumerate(details, start=1):
                amt = tx.find("c:Amt", ns)
                if amt is None:
                    amt = tx.find("c:AmtDtls/c:TxAmt/c:Amt", ns)
                tx_amount, tx_currency = _amount(amt, f"{where}, transaction {index}")
                refs = _tx_references(tx, ns)
                base = entry_refs[0] if entry_refs else f"{statement_id}#{position}"
                entries.append(
                    Entry(
                        entry_id=f"{base}/{refs[0] if refs else index}"[:200],
                        amount=tx_amount,
                        currency=tx_currency,
                        booked_on=booked_on,
                        references=[*entry_refs, *refs],
                        remittance=_remittance(tx, ns),
                        debtor=_debtor(tx, ns),
                    )
                )
            continue
        refs = entry_refs + [ref for tx in details for ref in _tx_references(tx, ns)]
        entry_id = refs[0] if refs else _fallback_id(statement_id, position, amount, booked_on)
        entries.append(
            Entry(
                entry_id=entry_id[:200],
                amount=amount,
                currency=currency,
                booked_on=booked_on,
                references=refs,
                remittance=_remittance(node, ns),
                debtor=_debtor(node, ns),
            )
        )
    return entries, skipped


def _fallback_id(statement_id: str, position: int, amount: Decimal, day: dt.date) -> str:
    """An entry without any bank reference: known by its statement and position, so the
    same file imported again is still recognised."""
    digest = hashlib.sha256(f"{statement_id}|{position}|{amount}|{day}".encode()).hexdigest()
    return f"stmt:{digest[:32]}"


def parse(data: bytes) -> list[Statement]:
    """The statements of a CAMT.053 document; :class:`StatementError` naming what is
    wrong with one that is not."""
    if not isinstance(data, bytes | bytearray):
        raise StatementError("the statement must be bytes")
    if len(data) > MAX_BYTES:
        raise StatementError(f"the file is over {MAX_BYTES // (1024 * 1024)} MB")
    if not data.strip():
        raise StatementError("the file is empty")
    if b"<!DOCTYPE" in data.upper() or b"<!ENTITY" in data.upper():
        raise StatementError("the file has a DOCTYPE or an entity declaration: refused")
    try:
        root = etree.fromstring(bytes(data), parser=_parser())
    except etree.XMLSyntaxError as problem:
        raise StatementError(f"not well-formed XML: {str(problem)[:200]}") from None
    except (ValueError, etree.LxmlError) as problem:
        raise StatementError(f"not readable XML: {str(problem)[:200]}") from None
    if not isinstance(root.tag, str):
        raise StatementError("the document has no root element")
    namespace = etree.QName(root).namespace or ""
    if namespace not in NAMESPACES:
        shown = namespace[:80] or "no namespace"
        raise StatementError(f"not a CAMT.053 statement ({shown}); camt.053.001.02 to .08 are read")
    if etree.QName(root).localname != "Document":
        raise StatementError("the root element is not Document")
    ns = {"c": namespace}
    found = root.findall("c:BkToCstmrStmt/c:Stmt", ns)
    if not found:
        raise StatementError("no statement (BkToCstmrStmt/Stmt) in the file")
    statements = []
    for index, node in enumerate(found, start=1):
        statement_id = _text(node, "c:Id", ns) or f"statement-{index}"
        account = _text(node, "c:Acct/c:Id/c:IBAN", ns) or _text(
            node, "c:Acct/c:Id/c:Othr/c:Id", ns
        )
        entries, skipped = _entries(node, ns, statement_id)
        statements.append(Statement(statement_id[:100], account[:60], entries, skipped))
    return statements
