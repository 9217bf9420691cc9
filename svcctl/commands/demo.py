"""``svcctl demo``: the demo history on a development server (``POST /v1/admin/demo``)."""

from __future__ import annotations

from svcctl import EXIT_OK, output
from svcctl.commands.base import Command, connect


def cmd_demo(args) -> int:
    result = connect(args).post("demo", {})
    if args.json:
        output.print_json(result)
        return EXIT_OK
    if result["created"]:
        print(
            f"demo written in {result['seconds']:.1f} s: {len(result['customers'])} customers, "
            f"{len(result['invoices'])} invoices, credit note(s) "
            f"{', '.join(result['credit_notes'])}"
        )
    else:
        print(f"the demo is already there ({len(result['customers'])} customers); nothing written")
    return EXIT_OK


COMMANDS = [
    Command(
        "demo",
        online=True,
        summary="fill an empty development server with 90 days of demo history",
        handler=cmd_demo,
        description="Write the demo history (manage.py demo) on a development server "
        "(SVC_DEBUG=1; others answer 404): four customers in DE, FR, JP and KW, their "
        "batches, activations and usage over the past 90 days, three invoices each and "
        "a credit note. Refused (409, naming them) when the database holds customers the "
        "demo did not make; a second run writes nothing.",
    ),
]
