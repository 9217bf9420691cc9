"""Usage, invoices and the catalogue they are rated from."""

from __future__ import annotations

import argparse
import os
import sys

from svccore import dates
from svcctl import EXIT_OK, files, output
from svcctl.client import segment
from svcctl.commands.base import (
    Command,
    connect,
    date_arg,
    positive,
)
from svcctl.commands.credit_notes import cmd_credit_note, credit_note_arguments


def cmd_usage(args) -> int:
    result = connect(args).get(f"usage/{segment(args.license_id)}")
    if args.json:
        output.print_json(result)
    else:
        output.fields([(name, value) for name, value in result.items()])
    return EXIT_OK


def cmd_usage_conflicts(args) -> int:
    query = {
        "customer_id": args.customer,
        "license_id": args.license,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    client = connect(args)
    conflicts: list[dict] = []
    while True:
        page = client.get("usage/conflicts", **query)
        conflicts += page["conflicts"]
        if not (args.all and page["next_cursor"]):
            break
        query["cursor"] = page["next_cursor"]
    if args.json:
        output.print_json({"conflicts": conflicts, "next_cursor": page["next_cursor"]})
        return EXIT_OK
    output.table(
        ["seen", "licence", "device", "period", "inferences held", "inferences sent"],
        (
            [
                output.when(c["seen_at"]),
                c["license_id"],
                c["device_id"],
                dates.span(c["period_start"], c["period_end"]),
                f"{c['held']['inferences']:,}",
                f"{c['sent']['inferences']:,}",
            ]
            for c in conflicts
        ),
        align_right={4, 5},
    )
    noun = "conflict" if len(conflicts) == 1 else "conflicts"
    print(f"\n{len(conflicts):,} {noun}", file=sys.stderr)
    if page["next_cursor"] and not args.all:
        print(f"more: --cursor {page['next_cursor']} (or --all)", file=sys.stderr)
    return EXIT_OK


def cmd_invoice(args) -> int:
    client = connect(args)
    if args.csv != "-":
        files.refuse_existing(args.csv, "--csv", force=args.force)
    result = client.get(
        f"invoice/{segment(args.customer)}", period_days=args.days, currency=args.currency
    )
    if args.csv:
        if args.csv == "-":
            output.invoice_csv(result, sys.stdout)
        else:
            with files.create_text(args.csv, option="--csv", force=args.force) as handle:
                output.invoice_csv(result, handle)
            if not args.json:
                print(f"wrote {args.csv}", file=sys.stderr)
        if args.csv == "-":
            return EXIT_OK
    if args.json:
        output.print_json(result)
        return EXIT_OK
    currency = result["currency"]
    print(
        f"invoice preview {result['customer_id']}: "
        f"{output.period(result['period_start'], result['period_end'])} ({currency})\n"
    )
    output.table(
        ["kind", "sku", "description", "quantity", "unit", "unit price", "amount"],
        (
            [
                line["kind"],
                line["sku"],
                line["description"],
                line["quantity"],
                line["unit"],
                output.amount(line["unit_price"], currency),
                output.amount(line["amount"], currency),
            ]
            for line in result["lines"]
        ),
    )
    print(f"\ntotal {output.money(result['total'], currency)}")
    return EXIT_OK


def cmd_catalogue(args) -> int:
    result = connect(args).get("catalogue")
    if args.json:
        output.print_json(result)
        return EXIT_OK
    output.table(
        ["sku", "name", "modules", "streams", "fps", "api calls", "term", "grace", "unit prices"],
        (
            [
                e["sku"],
                e["name"],
                ",".join(e["modules"]),
                e["max_streams"],
                e["max_fps"],
                e["api_calls"] or "unmetered",
                f"{e['term_days']}d" if e["term_days"] else "perpetual",
                f"{e['grace_days']}d",
                " ".join(
                    f"{t['from_units']}+:{output.amount(t['unit_price'], e['currency'])}"
                    for t in e["unit_price_tiers"]
                )
                + f" {e['currency']}",
            ]
            for e in result["skus"]
        ),
    )
    # Add-ons (issue 42): sold for a SKU's batches and licences after the sale.
    addons = [(e, a) for e in result["skus"] for a in e.get("addons", [])]
    if addons:
        print("\nadd-ons (svcctl addon-add):")
        output.table(
            ["sku", "add-on", "name", "adds", "price"],
            (
                [
                    e["sku"],
                    a["code"] + ("" if a["available"] else " (withdrawn)"),
                    a["name"],
                    " ".join(
                        [f"+{m}" for m in a["modules"]]
                        + [
                            f"+{a[name]:,} {label}"
                            for name, label in (
                                ("extra_streams", "streams"),
                                ("extra_fps", "fps"),
                                ("extra_api_calls", "API calls"),
                            )
                            if a[name]
                        ]
                    ),
                    f"{output.amount(a['unit_price'], e['currency'])} {e['currency']} per unit"
                    + (f" per {e['term_days']}-day term" if e["term_days"] else ", once"),
                ]
                for e, a in addons
            ),
        )
    return EXIT_OK


KINDS = {"invoice": "invoice", "credit-note": "credit_note"}


def _document_total(document: dict) -> str:
    return output.money(document["total"], document["currency"])


def cmd_invoices(args) -> int:
    query = {
        "customer_id": args.customer,
        "kind": KINDS.get(args.kind) if args.kind else None,
        "issued_after": args.issued_after,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    client = connect(args)
    documents: list[dict] = []
    while True:
        page = client.get("invoices", **query)
        documents += page["invoices"]
        if not (args.all and page["next_cursor"]):
            break
        query["cursor"] = page["next_cursor"]
    if args.json:
        output.print_json({"invoices": documents, "next_cursor": page["next_cursor"]})
        return EXIT_OK
    output.table(
        ["number", "issued", "customer", "period", "total", "credits / credited by"],
        (
            [
                d["number"],
                output.day(d["issued_at"]),
                f"{d['customer_name']} ({d['customer_id']})",
                output.period(d["period_start"], d["period_end"]),
                _document_total(d),
                d["credits"] or d["credited_by"] or "",
            ]
            for d in documents
        ),
        align_right={4},
    )
    noun = "document" if len(documents) == 1 else "documents"
    print(f"\n{len(documents):,} {noun}", file=sys.stderr)
    if page["next_cursor"] and not args.all:
        print(f"more: --cursor {page['next_cursor']} (or --all)", file=sys.stderr)
    return EXIT_OK


def _print_document(d: dict) -> None:
    currency = d["currency"]
    title = "credit note" if d["kind"] == "credit_note" else "invoice"
    output.fields(
        [
            (title, d["number"]),
            ("customer", f"{d['customer_name']} ({d['customer_id']})"),
            ("issued", output.day(d["issued_at"])),
            ("period", output.period(d["period_start"], d["period_end"])),
        ]
        + ([("due", output.day(d["due_at"]))] if d.get("due_at") else [])
        + ([("credits", d["credits"]), ("reason", d["reason"])] if d["credits"] else [])
        + ([("credited by", d["credited_by"])] if d.get("credited_by") else [])
    )
    print()
    output.table(
        ["#", "kind", "sku", "description", "quantity", "unit", "unit price", "amount"],
        (
            [
                position,
                line["kind"],
                line["sku"],
                line["description"],
                output.quantity(line["quantity"]),
                line["unit"],
                output.amount(line["unit_price"], currency, grouped=True),
                output.amount(line["amount"], currency, grouped=True),
            ]
            for position, line in enumerate(d["lines"], start=1)
        ),
        align_right={0, 4, 6, 7},
    )
    print(f"\ntotal {output.money(d['total'], currency, grouped=True)}")
    for row in d.get("tax_breakdown") or []:
        print(
            f"VAT {row['category']} {output.quantity(row['rate'])} % on "
            f"{output.amount(row['taxable_amount'], currency, grouped=True)}: "
            f"{output.money(row['tax_amount'], currency, grouped=True)}"
            + (f" ({row['exemption_reason']})" if row.get("exemption_reason") else "")
        )
    if d.get("gross_total") is not None:
        print(f"total due {output.money(d['gross_total'], currency, grouped=True)}")


def cmd_invoice_show(args) -> int:
    client = connect(args)
    if args.pdf and args.pdf != "-":
        files.refuse_existing(args.pdf, "--pdf", force=args.force)
    document = client.get(f"invoices/{segment(args.number)}")
    if args.pdf == "-":
        client.download(f"invoices/{segment(args.number)}.pdf", sys.stdout.buffer)
        sys.stdout.flush()
        return EXIT_OK
    if args.pdf:
        partial = f"{args.pdf}.part"
        with open(partial, "wb") as target:
            size = client.download(f"invoices/{segment(args.number)}.pdf", target)
        os.replace(partial, args.pdf)
        print(f"wrote {args.pdf} ({size:,} bytes)", file=sys.stderr)
    if args.json:
        output.print_json(document)
    else:
        _print_document(document)
    return EXIT_OK


# --format: the route's suffix and the default file name's.
DOWNLOADS = {"pdf": (".pdf", ".pdf"), "cii": (".xml", ".cii.xml"), "ubl": (".xml", ".ubl.xml")}


def cmd_invoice_download(args) -> int:
    """The document as the customer gets it: Factur-X PDF, or its EN 16931 XML."""
    client = connect(args)
    suffix, extension = DOWNLOADS[args.format]
    out = args.out or f"{args.number}{extension}"
    path = f"invoices/{segment(args.number)}{suffix}"
    query = {"syntax": args.format} if args.format != "pdf" else {}
    if out == "-":
        client.download(path, sys.stdout.buffer, **query)
        sys.stdout.flush()
        return EXIT_OK
    files.refuse_existing(out, "--out", force=args.force)
    partial = f"{out}.part"
    try:
        with open(partial, "wb") as target:
            size = client.download(path, target, **query)
    except BaseException:
        os.unlink(partial)
        raise
    os.replace(partial, out)
    print(f"wrote {out} ({size:,} bytes)", file=sys.stderr)
    return EXIT_OK


def _invoices_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--customer", help="only this customer's documents (CUST-...)")
    p.add_argument("--kind", choices=sorted(KINDS), help="only invoices or only credit notes")
    p.add_argument(
        "--issued-after",
        type=date_arg,
        metavar="DATE",
        help="only documents issued after DATE (YYYY-MM-DD, UTC)",
    )
    p.add_argument("--limit", type=positive, default=100, help="documents per page (default 100)")
    p.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    p.add_argument("--all", action="store_true", help="every page")


def _invoice_show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("number", help="invoice or credit note number, INV-... or CN-...")
    p.add_argument(
        "--pdf",
        metavar="FILE",
        help="also save the document as PDF to FILE (- = stdout); an existing FILE is "
        "refused unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --pdf file")


def _invoice_download_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("number", help="invoice or credit note number, INV-... or CN-...")
    p.add_argument(
        "--format",
        choices=sorted(DOWNLOADS),
        default="pdf",
        help="pdf: Factur-X (PDF/A-3 with the CII XML inside); cii or ubl: the EN 16931 "
        "XML alone (default pdf)",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="where to write it (- = stdout; default NUMBER.pdf or NUMBER.<format>.xml); an "
        "existing FILE is refused unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing file")


def _usage_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("license_id", help="licence id, LIC-...")


def _usage_conflicts_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--customer", help="only this customer's conflicts (CUST-...)")
    p.add_argument("--license", help="only this licence's conflicts (LIC-...)")
    p.add_argument("--limit", type=positive, default=100, help="conflicts per page (default 100)")
    p.add_argument("--cursor", help="the next page: the cursor the previous page printed")
    p.add_argument("--all", action="store_true", help="every page")


def _invoice_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("customer", help="customer id")
    p.add_argument("--days", type=positive, default=30, help="period in days, 1-3660 (default 30)")
    p.add_argument(
        "--currency",
        help="the invoice in this currency (ISO 4217, e.g. EUR); needed for a customer who "
        "buys in several, who gets one invoice per currency",
    )
    p.add_argument(
        "--csv",
        metavar="FILE",
        help="export the lines as CSV to FILE (- = stdout); an existing FILE is refused "
        "unless --force",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --csv file")


COMMANDS = [
    Command(
        "usage",
        online=True,
        summary="usage totals of a licence",
        handler=cmd_usage,
        arguments=_usage_arguments,
    ),
    Command(
        "usage-conflicts",
        online=True,
        summary="usage records refused as conflicts, kept for review, newest first",
        handler=cmd_usage_conflicts,
        description="Usage records a device sent whose licence, device and period the "
        "service already held with other counts: refused (the held counts are billed) and "
        "kept for review, newest first, one page at a time (--all: every page).",
        arguments=_usage_conflicts_arguments,
    ),
    Command(
        "invoice",
        online=True,
        summary="rate (preview) a customer's invoice; --csv exports it",
        handler=cmd_invoice,
        description="Rate CUSTOMER's invoice for the last --days days (nothing is stored).",
        arguments=_invoice_arguments,
    ),
    Command(
        "invoices",
        online=True,
        summary="issued invoices and credit notes, newest first",
        handler=cmd_invoices,
        description="Issued invoices and credit notes, newest first, one page at a time "
        "(--all: every page).",
        arguments=_invoices_arguments,
    ),
    Command(
        "invoice-show",
        online=True,
        summary="one invoice or credit note with its lines; --pdf saves the document",
        handler=cmd_invoice_show,
        arguments=_invoice_show_arguments,
    ),
    Command(
        "invoice-download",
        online=True,
        summary="save an invoice or credit note: Factur-X PDF, or EN 16931 XML (CII, UBL)",
        handler=cmd_invoice_download,
        description="Save a document as the customer gets it: --format pdf (default) is "
        "Factur-X, a PDF/A-3 with its EN 16931 CII XML inside; cii and ubl are the XML "
        "alone (UN/CEFACT CII, OASIS UBL 2.1). A document that cannot be an EN 16931 "
        "e-invoice (amounts with more than two decimals, or issued before VAT) has no "
        "XML: the service says why (exit 1).",
        arguments=_invoice_download_arguments,
    ),
    Command(
        "credit-note",
        online=True,
        summary="credit an issued invoice, whole or --line N=QTY (asks first; --yes does not)",
        handler=cmd_credit_note,
        description="Issue a credit note of invoice NUMBER: whole (what earlier credit "
        "notes left), or the lines and quantities of --line N=QTY. Shows the credit note "
        "as the service would issue it and asks first, unless --yes; --dry-run only shows "
        "it. --rebill returns the credited events to waiting for the customer's next "
        "invoice (the default for a whole invoice not credited before); otherwise a price "
        "credit.",
        arguments=credit_note_arguments,
    ),
    Command(
        "catalogue",
        online=True,
        summary="the SKU catalogue (--json makes a catalogue file for mint)",
        handler=cmd_catalogue,
        description=(
            "The live catalogue. `svcctl catalogue --json > catalogue.json` makes a "
            "catalogue file for `svcctl mint --catalogue`."
        ),
        arguments=None,
    ),
]
