"""The /v1 payment endpoints (issue 43): an invoice's payments (read, record) and a
bank statement's import. One view per operation: parse, call one service, render."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import payment_serializers as serializers
from billing import payments, statements
from config.api import schema
from config.api.fields import rendered, validated
from operators.permissions import requires


class InvoicePaymentsApi(APIView):
    @extend_schema(
        parameters=[schema.id_path("number", "The invoice."), schema.retry_after(429, 503)],
        responses={
            200: serializers.InvoicePaymentsOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    400: "The number is a credit note.",
                    404: "No such invoice.",
                }
            ),
        },
        operation_id="v1_admin_invoice_payments_list",
        description="An invoice's state and balance, and the payments recorded against it, "
        "oldest first.",
    )
    @requires("view_service")
    def get(self, request, number: str):
        invoice, found = payments.payments_of(number=number)
        answer = {"invoice": invoice, "payments": found}
        return Response(rendered(serializers.InvoicePaymentsOut, answer))

    @extend_schema(
        request=serializers.PaymentIn,
        parameters=[schema.id_path("number", "The invoice paid."), schema.retry_after(429, 503)],
        responses={
            201: OpenApiResponse(serializers.PaymentOut, description="The payment recorded."),
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or an amount with more decimals than "
                    "the currency has, 0, a date in the future, a credit note, or a "
                    "correcting entry without a note.",
                    404: "No such invoice.",
                    409: "A correcting entry larger than what was paid.",
                }
            ),
        },
        description="Record a payment against an invoice (an overpayment is recorded: the "
        "balance goes negative). Payments are never edited: a negative amount is a "
        "correcting entry.",
    )
    @requires("manage_billing")
    def post(self, request, number: str):
        data = validated(serializers.PaymentIn, request.data)
        payment = payments.payment_record(number=number, **data)
        return Response(rendered(serializers.PaymentOut, payment), status=status.HTTP_201_CREATED)


class StatementImportApi(APIView):
    @extend_schema(
        request=serializers.StatementIn,
        parameters=[schema.retry_after(429, 503)],
        responses={
            200: serializers.StatementImportOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or a file that is not a CAMT.053 "
                    "statement (the detail names the problem); nothing is imported.",
                }
            ),
        },
        operation_id="v1_admin_payments_camt053",
        description="Import a CAMT.053 bank statement: each booked credit is matched to the "
        "invoices its remittance names and recorded once (an entry imported before is "
        "reported, not recorded again). All or nothing; dry_run imports nothing.",
    )
    @requires("manage_billing")
    def post(self, request):
        data = validated(serializers.StatementIn, request.data)
        report = statements.statement_import(
            data=data["statement"].encode("utf-8"), dry_run=data["dry_run"]
        )
        return Response(rendered(serializers.StatementImportOut, report))
