"""The /v1 billing endpoints: usage upload (devices); usage and invoice reads, issuing
the next invoice (409 naming the invoice a period conflicts with) and credit notes
(operators). One view per operation: parse, call one service or selector, render."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.refusals import device_of, note_device
from billing import credit_serializers, demo, downloads, selectors, serializers, services
from billing.offline import usage_file_ingest
from config import metrics
from config.api import schema
from config.api.fields import rendered, validated
from config.api.renderers import PDFNegotiation, XMLNegotiation
from config.api.views import DeviceApi
from config.errors import InvalidInput, NotFound
from licensing.offline_serializers import OfflineUsageIn
from operators.permissions import requires
from signing import keyring
from signing.selectors import signed_key_name
from svccore.claims import device_id_problem


def _bearer(request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class UsageUploadApi(DeviceApi):
    @extend_schema(
        request=serializers.UsageUploadIn,
        responses={
            200: serializers.UsageUploadOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or a record whose period_end is not "
                    "after its period_start.",
                    401: "Bearer token missing or not verifying.",
                    403: "Token bound to another device, a batch key, not on file, or its "
                    "licence revoked.",
                    **schema.DATABASE_UNAVAILABLE,
                }
            ),
        },
        parameters=[schema.retry_after(503)],
        auth=schema.UNIT_TOKEN_AUTH,
        description="Upload a device's usage records, stored once each; a signed receipt.",
    )
    def post(self, request):
        body = request.data
        note_device(
            request,
            device=lambda: device_of(body),
            key_name=lambda: signed_key_name(_bearer(request)),
        )
        if not isinstance(body, dict):
            raise InvalidInput("body must be a JSON object {device_id, license_id, records, nonce}")
        device_id = body.get("device_id")
        # The check every device id entry shares (control and bidi characters refused);
        # the service checks the type and compares it with the token's.
        problem = device_id_problem(device_id) if isinstance(device_id, str) else ""
        if problem:
            raise InvalidInput(f"device_id {problem}")
        result = services.usage_ingest(
            token=_bearer(request),
            device_id=device_id,
            records=body.get("records"),
            nonce=body.get("nonce"),
        )
        for name, result_label in (("accepted", "accepted"), ("duplicates", "duplicate"),
                                   ("deferred", "deferred")):  # fmt: skip
            if result.get(name):
                metrics.USAGE_RECORDS.labels(result_label).inc(result[name])
        for name, result_label in (("conflicts", "conflict"), ("refused", "refused")):
            if result[name]:
                metrics.USAGE_RECORDS.labels(result_label).inc(len(result[name]))
        # The receipt's signing key, for devices that have not seen its certificate yet.
        certificate = keyring.active_certificate()
        answer = {**result, "certificates": [certificate] if certificate else []}
        return Response(rendered(serializers.UsageUploadOut, answer))


class LicenseUsageApi(APIView):
    @extend_schema(
        parameters=[schema.id_path("license_id", "The licence."), schema.retry_after(429, 503)],
        responses={
            200: serializers.LicenseUsageOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such licence."}),
        },
        description="Usage totals of a licence and its record count.",
    )
    @requires("view_service")
    def get(self, request, license_id: str):
        usage = selectors.license_usage(license_id=license_id)
        return Response(rendered(serializers.LicenseUsageOut, usage))


class UsageConflictsApi(APIView):
    @extend_schema(
        parameters=[serializers.UsageConflictQuery, schema.retry_after(429, 503)],
        responses={
            200: serializers.UsageConflictPageOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.QUERY_ERRORS[400]} Or a cursor this API did not give.",
                    404: "customer_id or license_id names no customer or licence.",
                }
            ),
        },
        operation_id="v1_admin_usage_conflicts_list",
        description="Usage records refused because the service already held their licence, "
        "device and period with other counts, kept for review; newest first.",
    )
    @requires("view_service")
    def get(self, request):
        query = validated(serializers.UsageConflictQuery, request.query_params.dict())
        page = selectors.usage_conflicts_page(**query)
        answer = {"conflicts": page.conflicts, "next_cursor": page.next_cursor}
        return Response(rendered(serializers.UsageConflictPageOut, answer))


class InvoiceApi(APIView):
    @extend_schema(
        parameters=[
            schema.id_path("customer_id", "The customer."),
            serializers.InvoiceQuery,
            schema.retry_after(429, 503),
        ],
        responses={
            200: serializers.InvoicePreviewOut,
            **schema.errors(
                {
                    **schema.QUERY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    404: "No such customer.",
                    409: "The customer buys in several currencies and currency names none "
                    "of them (the detail lists them).",
                    500: "A SKU is missing from the catalogue.",
                }
            ),
        },
        description="Rate the invoice of the period_days before now (a preview; nothing is "
        "stored), in one currency: a customer buying in several has one invoice each.",
    )
    @requires("view_service")
    def get(self, request, customer_id: str):
        query = serializers.InvoiceQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rated = services.invoice_rate(
            customer_id=customer_id,
            period_days=query.validated_data["period_days"],
            currency=query.validated_data.get("currency"),
        )
        return Response(rendered(serializers.InvoicePreviewOut, rated))


class InvoicesApi(APIView):
    @extend_schema(
        parameters=[serializers.InvoiceListQuery, schema.retry_after(429, 503)],
        responses={
            200: serializers.InvoicePageOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.QUERY_ERRORS[400]} Or a cursor this API did not give.",
                    404: "customer_id names no customer.",
                }
            ),
        },
        operation_id="v1_admin_invoices_list",
        description="Issued invoices and credit notes, newest first; next_cursor pages to "
        "older ones.",
    )
    @requires("view_service")
    def get(self, request):
        query = validated(serializers.InvoiceListQuery, request.query_params.dict())
        page = selectors.invoices_page(**query)
        answer = {"invoices": page.invoices, "next_cursor": page.next_cursor}
        return Response(rendered(serializers.InvoicePageOut, answer))

    @extend_schema(
        request=serializers.InvoiceIssueIn,
        responses={
            201: OpenApiResponse(serializers.InvoiceOut, description="The invoice issued."),
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or period_end not a 00:00 UTC, or "
                    "nothing to invoice.",
                    404: "No such customer.",
                    409: "The period overlaps an issued invoice (named), is not over yet, or "
                    "is not due; or the customer buys in several currencies and currency "
                    "names none of them.",
                    500: "A SKU is missing from the catalogue.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Issue the customer's next contiguous invoice in one currency (a "
        "customer buying in several gets one invoice per currency, each asked for).",
    )
    @requires("manage_billing")
    def post(self, request):
        data = validated(serializers.InvoiceIssueIn, request.data)
        invoice = services.invoice_issue(
            customer_id=data["customer_id"],
            period_days=data["period_days"],
            end=data.get("period_end"),
            currency=data.get("currency"),
        )
        return Response(rendered(serializers.InvoiceOut, invoice), status=status.HTTP_201_CREATED)


class CreditNoteApi(APIView):
    @extend_schema(
        request=credit_serializers.CreditNoteIn,
        parameters=[
            schema.id_path("number", "The invoice to credit."),
            schema.retry_after(429, 503),
        ],
        responses={
            201: OpenApiResponse(serializers.InvoiceOut, description="The credit note issued."),
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or the number is a credit note.",
                    404: "No such invoice.",
                    409: "The invoice was already credited (the detail names the note).",
                }
            ),
        },
        description="Credit an issued invoice, whole (without ``lines``) or chosen lines "
        "and quantities (``lines``, each at most what remains of it across its credit "
        "notes); ``rebill`` returns the credited events to waiting.",
    )
    @requires("manage_billing")
    def post(self, request, number: str):
        data = validated(credit_serializers.CreditNoteIn, request.data)
        note = services.credit_note_issue(number=number, **_credit_arguments(data))
        return Response(rendered(serializers.InvoiceOut, note), status=status.HTTP_201_CREATED)


class DemoApi(APIView):
    @extend_schema(
        request=None,
        parameters=[schema.retry_after(429, 503)],
        responses={
            201: OpenApiResponse(serializers.DemoOut, description="The demo history written."),
            200: OpenApiResponse(serializers.DemoOut, description="It was already there."),
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    404: "Not a development server (SVC_DEBUG is off).",
                    409: "The database holds customers the demo did not make (named).",
                }
            ),
        },
        description="Development servers only: write the demo history (manage.py demo).",
    )
    @requires("manage_billing")
    def post(self, request):
        # A demo on a production database would mix invented invoices into real books:
        # the endpoint exists only where SVC_DEBUG is on (make run).
        if not settings.DEBUG:
            raise NotFound("the demo runs only on a development server (SVC_DEBUG=1)")
        result = demo.demo_create()
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(rendered(serializers.DemoOut, result.as_dict()), status=code)


def _credit_arguments(data: dict) -> dict:
    lines = data.get("lines")
    return {
        "reason": data["reason"],
        "lines": None if lines is None else [dict(item) for item in lines],
        "rebill": data.get("rebill"),
    }


class CreditNoteDraftApi(APIView):
    @extend_schema(
        request=credit_serializers.CreditNoteIn,
        parameters=[
            schema.id_path("number", "The invoice to credit."),
            schema.retry_after(429, 503),
        ],
        responses={
            200: OpenApiResponse(
                credit_serializers.CreditNoteDraftOut,
                description="The credit note that would be issued (nothing is issued).",
            ),
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    400: f"{schema.BODY_ERRORS[400]} Or the number is a credit note.",
                    404: "No such invoice.",
                    409: "Nothing remains to credit, or a line would be credited beyond "
                    "what it billed.",
                }
            ),
        },
        description="Preview a credit note: what POST .../credit-note with the same body "
        "would issue now, issued and rolled back.",
    )
    @requires("manage_billing")
    def post(self, request, number: str):
        data = validated(credit_serializers.CreditNoteIn, request.data)
        draft = services.credit_note_draft(number=number, **_credit_arguments(data))
        return Response(rendered(credit_serializers.CreditNoteDraftOut, draft))


class InvoiceDetailApi(APIView):
    @extend_schema(
        parameters=[
            schema.id_path("number", "The invoice or credit note (INV-... or CN-...)."),
            schema.retry_after(429, 503),
        ],
        responses={
            200: serializers.InvoiceOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such invoice."}),
        },
        description="An issued invoice or credit note with its lines.",
    )
    @requires("view_service")
    def get(self, request, number: str):
        document = selectors.invoice_get(number=number)
        return Response(rendered(serializers.InvoiceOut, document))


class InvoicePdfApi(APIView):
    content_negotiation_class = PDFNegotiation  # Accept: application/pdf, not 406

    @extend_schema(
        parameters=[
            schema.id_path("number", "The invoice or credit note (INV-... or CN-...)."),
            schema.retry_after(429, 503),
        ],
        responses={
            (200, "application/pdf"): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="The document as sent to the customer (seller and buyer, "
                "dates, due date, lines, net total, VAT per rate, total due) as Factur-X: "
                "PDF/A-3b with its EN 16931 CII XML embedded (factur-x.xml); without it "
                "when the document cannot be an EN 16931 e-invoice.",
            ),
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such invoice."}),
        },
        description="An issued invoice or credit note as PDF.",
    )
    @requires("view_service")
    def get(self, request, number: str):
        document = selectors.invoice_get(number=number)
        return downloads.pdf_response(document)


EINVOICE_ERRORS = {
    400: "syntax is not cii or ubl.",
    404: "No such invoice.",
    409: "The document cannot be an EN 16931 e-invoice (amounts with more than two "
    "decimals, or issued before VAT); detail says which.",
}


def einvoice_schema(description: str):
    return extend_schema(
        parameters=[
            schema.id_path("number", "The invoice or credit note (INV-... or CN-...)."),
            serializers.EInvoiceQuery,
            schema.retry_after(429, 503),
        ],
        responses={
            (200, "application/xml"): OpenApiResponse(
                OpenApiTypes.BINARY,
                description="EN 16931 XML: CII (the Factur-X XML) or UBL 2.1 (Invoice or "
                "CreditNote).",
            ),
            **schema.errors({**schema.ADMIN_ERRORS, **EINVOICE_ERRORS}),
        },
        description=description,
    )


class InvoiceXmlApi(APIView):
    content_negotiation_class = XMLNegotiation  # Accept: application/xml, not 406

    @einvoice_schema("An issued invoice or credit note as an EN 16931 e-invoice.")
    @requires("view_service")
    def get(self, request, number: str):
        syntax = validated(serializers.EInvoiceQuery, request.query_params)["syntax"]
        document = selectors.invoice_get(number=number)
        return downloads.xml_response(document, syntax)


def usage_file_answer(request, **scope) -> Response:
    """Read a usage export file (``{"usage": text}``) and answer it (issue 44)."""
    data = validated(OfflineUsageIn, request.data)
    result = usage_file_ingest(export_text=data["usage"], **scope)
    return Response(rendered(serializers.OfflineUsageOut, result))


class OfflineUsageApi(APIView):
    @extend_schema(
        request=OfflineUsageIn,
        responses={
            200: serializers.OfflineUsageOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    **schema.BODY_ERRORS,
                    400: "The usage file is damaged or truncated (the detail names the device "
                    "module's code, BAD_REQUEST), or a record POST /v1/usage refuses.",
                    401: "The file's licence does not verify.",
                    403: "The file's licence is bound to another device or not on file.",
                }
            ),
        },
        parameters=[schema.retry_after(429, 503)],
        description="Read an air-gapped camera's usage export file: its records are stored "
        "as POST /v1/usage stores them; the answer file holds the signed receipt and the "
        "licence's status.",
    )
    @requires("issue_licences")
    def post(self, request):
        return usage_file_answer(request, channel="api", actor=str(request.user or ""))
