"""The customer API (``/v1/customer/*``: read-only, a customer's key, its own rate
limit; the admin API's shapes, always the key's customer only), the operators'
invitations (``/v1/admin/customers/{id}/users``, ``/v1/admin/invitations/{id}/withdraw``)
and customers' API keys (``/v1/admin/customer-keys``)."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import downloads
from billing import selectors as billing_selectors
from billing.api import EINVOICE_ERRORS, usage_file_answer
from billing.serializers import EInvoiceQuery, InvoiceOut, InvoicePageOut, OfflineUsageOut
from config import clock
from config.api import schema
from config.api.fields import rendered, validated
from config.api.paging import named_row_page
from config.api.renderers import PDFNegotiation, XMLNegotiation
from customers.services import customer_get
from licensing import offline_serializers
from licensing import selectors as licensing_selectors
from licensing.api.offline import ACTIVATION_ERRORS, ActivationRateLimited, activation_answer
from licensing.serializers import FleetOut
from operators.permissions import requires
from portal import selectors, serializers, services
from portal.authentication import CustomerKeyAuthentication, IsCustomer, IsWritingCustomer
from portal.models import CustomerUser, Invitation
from svccore.timeunits import unix

CUSTOMER_ERRORS = {
    401: "Authorization: Bearer <customer API key> missing.",
    403: "The key is not valid or was revoked.",
    429: "The key's rate limit (SVC_CUSTOMER_API_RATE a minute), or too many wrong keys "
    "from this address; retry after Retry-After seconds.",
    **schema.DATABASE_UNAVAILABLE,
}
# Those of a listing with query parameters.
LIST_ERRORS = {
    **CUSTOMER_ERRORS,
    400: f"{schema.QUERY_ERRORS[400]} Or a cursor this API did not give.",
}
RETRY = schema.retry_after(429, 503)


class CustomerApi(APIView):
    """A customer key's endpoint: ``request.user.customer`` is the only customer it
    reads; another customer's ids are 404, as if they did not exist."""

    authentication_classes = (CustomerKeyAuthentication,)
    permission_classes = (IsCustomer,)


WRITE_ERRORS = {
    **CUSTOMER_ERRORS,
    **schema.BODY_ERRORS,
    403: "The key is not valid, was revoked, or is read-only (create one with write access).",
}


class CustomerOfflineActivationsApi(ActivationRateLimited, CustomerApi):
    permission_classes = (IsWritingCustomer,)

    @extend_schema(
        request=offline_serializers.OfflineActivationIn,
        responses={
            200: offline_serializers.OfflineActivationOut,
            **schema.errors(
                {
                    **WRITE_ERRORS,
                    **ACTIVATION_ERRORS,
                    403: f"{WRITE_ERRORS[403]} Or {ACTIVATION_ERRORS[403][0].lower()}"
                    f"{ACTIVATION_ERRORS[403][1:]}",
                    404: "The request's batch is not one of the key's customer's.",
                }
            ),
        },
        parameters=[RETRY],
        description="Answer an air-gapped camera's activation request file, as "
        "POST /v1/admin/offline/activations does, for the key's customer's batches only "
        "(a key with write access).",
    )
    def post(self, request):
        customer = request.user.customer
        return activation_answer(
            request, channel="customer-api", customer_id=customer.pk, actor=str(request.user)
        )


class CustomerOfflineUsageApi(CustomerApi):
    permission_classes = (IsWritingCustomer,)

    @extend_schema(
        request=offline_serializers.OfflineUsageIn,
        responses={
            200: OfflineUsageOut,
            **schema.errors(
                {
                    **WRITE_ERRORS,
                    400: "The usage file is damaged or truncated (BAD_REQUEST), or a record "
                    "POST /v1/usage refuses.",
                    401: "The file's licence does not verify.",
                    404: "The file's licence is not one of the key's customer's.",
                }
            ),
        },
        parameters=[RETRY],
        description="Store an air-gapped camera's usage export file and answer its receipt, "
        "as POST /v1/admin/offline/usage does, for the key's customer's licences only "
        "(a key with write access).",
    )
    def post(self, request):
        customer = request.user.customer
        return usage_file_answer(
            request, channel="customer-api", customer_id=customer.pk, actor=str(request.user)
        )


class CustomerFleetApi(CustomerApi):
    @extend_schema(
        parameters=[serializers.CustomerFleetQuery, RETRY],
        responses={200: FleetOut, **schema.errors({**LIST_ERRORS, 404: "No such batch."})},
        description="The customer's activated units, as GET /v1/admin/fleet answers them.",
    )
    def get(self, request):
        customer = request.user.customer
        query = validated(serializers.CustomerFleetQuery, request.query_params.dict())
        if query.get("batch_id"):
            selectors.batch_of(customer, query["batch_id"])
        weak = query.pop("weak_binding", None)
        if weak is not None:
            query["weak_binding"] = weak in ("1", "true")
        page = licensing_selectors.fleet_page(customer_id=customer.pk, **query)
        answer = {
            "units": page.units,
            "count": len(page.units),
            "next_cursor": page.next_cursor,
            "as_of": unix(clock.now()),
        }
        return Response(rendered(FleetOut, answer))


class CustomerBatchesApi(CustomerApi):
    @extend_schema(
        parameters=[serializers.PageQuery, RETRY],
        responses={200: serializers.BatchPageOut, **schema.errors(LIST_ERRORS)},
        description="The customer's batches with their seats, newest first.",
    )
    def get(self, request):
        query = validated(serializers.PageQuery, request.query_params.dict())
        batches, cursor = named_row_page(
            selectors.batches_of(request.user.customer),
            cursor=query.get("cursor"),
            limit=query["limit"],
            by="issued_at",
        )
        return Response(
            rendered(serializers.BatchPageOut, {"batches": batches, "next_cursor": cursor})
        )


class CustomerUsageApi(CustomerApi):
    @extend_schema(
        parameters=[serializers.UsageQuery, RETRY],
        responses={
            200: serializers.UsagePageOut,
            **schema.errors({**LIST_ERRORS, 404: "No such licence."}),
        },
        description="Usage totals per licence (as GET /v1/admin/usage/{license_id}), newest "
        "licence first; license_id: that licence only.",
    )
    def get(self, request):
        customer = request.user.customer
        query = validated(serializers.UsageQuery, request.query_params.dict())
        licenses = selectors.licenses_of(customer).exclude(kind="batch_key")
        if query.get("license_id"):
            selectors.license_of(customer, query["license_id"])
            licenses = licenses.filter(pk=query["license_id"])
        page, cursor = named_row_page(
            licenses, cursor=query.get("cursor"), limit=query["limit"], by="issued_at"
        )
        usage = billing_selectors.license_usages(license_ids=[lic.pk for lic in page])
        return Response(
            rendered(serializers.UsagePageOut, {"licenses": usage, "next_cursor": cursor})
        )


class CustomerInvoicesApi(CustomerApi):
    @extend_schema(
        parameters=[serializers.CustomerInvoiceQuery, RETRY],
        responses={200: InvoicePageOut, **schema.errors(LIST_ERRORS)},
        operation_id="v1_customer_invoices_list",
        description="The customer's invoices and credit notes, newest first.",
    )
    def get(self, request):
        query = validated(serializers.CustomerInvoiceQuery, request.query_params.dict())
        page = billing_selectors.invoices_page(customer_id=request.user.customer.pk, **query)
        answer = {"invoices": page.invoices, "next_cursor": page.next_cursor}
        return Response(rendered(InvoicePageOut, answer))


class CustomerInvoiceDetailApi(CustomerApi):
    @extend_schema(
        parameters=[schema.id_path("number", "The invoice or credit note."), RETRY],
        responses={200: InvoiceOut, **schema.errors({**CUSTOMER_ERRORS, 404: "No such invoice."})},
        description="One of the customer's invoices or credit notes, with its lines.",
    )
    def get(self, request, number: str):
        return Response(rendered(InvoiceOut, selectors.document_of(request.user.customer, number)))


class CustomerInvoicePdfApi(CustomerApi):
    content_negotiation_class = PDFNegotiation  # Accept: application/pdf, not 406

    @extend_schema(
        parameters=[schema.id_path("number", "The invoice or credit note."), RETRY],
        responses={
            (200, "application/pdf"): OpenApiResponse(OpenApiTypes.BINARY),
            **schema.errors({**CUSTOMER_ERRORS, 404: "No such invoice."}),
        },
        description="One of the customer's invoices or credit notes as PDF.",
    )
    def get(self, request, number: str):
        document = selectors.document_of(request.user.customer, number)
        return downloads.pdf_response(document)


class CustomerInvoiceXmlApi(CustomerApi):
    content_negotiation_class = XMLNegotiation  # Accept: application/xml, not 406

    @extend_schema(
        parameters=[schema.id_path("number", "The invoice or credit note."), EInvoiceQuery, RETRY],
        responses={
            (200, "application/xml"): OpenApiResponse(OpenApiTypes.BINARY),
            **schema.errors({**CUSTOMER_ERRORS, **EINVOICE_ERRORS}),
        },
        description="One of the customer's invoices or credit notes as an EN 16931 e-invoice "
        "(CII or UBL 2.1).",
    )
    def get(self, request, number: str):
        syntax = validated(EInvoiceQuery, request.query_params)["syntax"]
        document = selectors.document_of(request.user.customer, number)
        return downloads.xml_response(document, syntax)


# --- the operators' side: invitations --------------------------------------------------


def invitation_link_base(request) -> str:
    return request.build_absolute_uri(reverse("portal-invitation-base"))


def users_of(customer_id: str) -> dict:
    accounts = CustomerUser.objects.filter(customer_id=customer_id).select_related("user")
    return {
        "users": [
            {
                "email": a.user.email or a.user.get_username(),
                "name": a.name,
                "created_at": unix(a.created_at),
                "active": a.user.is_active,
            }
            for a in accounts
        ],
        "invitations": list(Invitation.objects.filter(customer_id=customer_id)[:100]),
    }


class CustomerUsersApi(APIView):
    @extend_schema(
        parameters=[schema.id_path("customer_id", "The customer."), schema.retry_after(429, 503)],
        responses={
            200: serializers.CustomerUsersOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such customer."}),
        },
        description="The customer's portal users and its latest 100 invitations.",
    )
    @requires("view_service")
    def get(self, request, customer_id: str):
        customer = customer_get(customer_id=customer_id)
        return Response(rendered(serializers.CustomerUsersOut, users_of(customer.pk)))

    @extend_schema(
        request=serializers.InvitationIn,
        parameters=[schema.id_path("customer_id", "The customer."), schema.retry_after(429, 503)],
        responses={
            201: serializers.InvitationOut,
            **schema.errors(
                {
                    **schema.BODY_ERRORS,
                    **schema.ADMIN_ERRORS,
                    404: "No such customer.",
                    409: "The address already has an account.",
                }
            ),
        },
        description="Invite a person to the customer's portal: an e-mail with a one-time "
        f"link that sets a password, valid {services.INVITATION_DAYS} days. Audited.",
    )
    @requires("manage_customers")
    def post(self, request, customer_id: str):
        data = validated(serializers.InvitationIn, request.data)
        invitation, _link = services.invitation_create(
            customer_id=customer_id,
            email=data["email"],
            name=data["name"],
            invited_by=str(request.user),
            link_base=invitation_link_base(request),
        )
        return Response(
            rendered(serializers.InvitationOut, invitation), status=status.HTTP_201_CREATED
        )


class InvitationWithdrawApi(APIView):
    @extend_schema(
        request=None,
        parameters=[
            schema.id_path("invitation_id", "The invitation (invitation_id of its listing)."),
            schema.retry_after(429, 503),
        ],
        responses={
            200: serializers.InvitationWithdrawnOut,
            **schema.errors(
                {
                    **schema.ADMIN_ERRORS,
                    404: "No such invitation.",
                    409: "The invitation was already accepted: deactivate the portal user.",
                }
            ),
        },
        description="Withdraw a pending (or expired) invitation: its link then answers as an "
        "expired or mistyped one and can never be accepted. Again: no change. Audited.",
    )
    @requires("manage_customers")
    def post(self, request, invitation_id: str):
        invitation = services.invitation_withdraw(
            invitation_id=invitation_id, withdrawn_by=str(request.user)
        )
        return Response(rendered(serializers.InvitationWithdrawnOut, invitation))


class CustomerKeysApi(APIView):
    @extend_schema(
        parameters=[serializers.CustomerKeyQuery, schema.retry_after(429, 503)],
        responses={
            200: serializers.CustomerKeyListOut,
            **schema.errors(
                {**schema.ADMIN_ERRORS, **schema.QUERY_ERRORS, 404: "No such customer."}
            ),
        },
        operation_id="v1_admin_customer_keys_list",
        description="Customers' read-only API keys (never their secrets), newest first: "
        "customer, owner, name, prefix, created, last used, revoked.",
    )
    @requires("view_service")
    def get(self, request):
        query = validated(serializers.CustomerKeyQuery, request.query_params.dict())
        licensing_selectors.filters_check(customer_id=query.get("customer_id"))
        keys = selectors.customer_keys(
            customer_id=query.get("customer_id"), state=query.get("state"), limit=query["limit"]
        )
        return Response(
            rendered(serializers.CustomerKeyListOut, {"keys": keys, "count": len(keys)})
        )


class CustomerKeyRevokeApi(APIView):
    @extend_schema(
        request=None,
        parameters=[schema.id_path("prefix", "The key's prefix."), schema.retry_after(429, 503)],
        responses={
            200: serializers.CustomerKeyOut,
            **schema.errors({**schema.ADMIN_ERRORS, 404: "No such customer API key."}),
        },
        description="Revoke any customer's API key at once: its next request answers 403. "
        "Again: no change (the first revocation's time is kept). Audited with the key's name "
        "and customer.",
    )
    @requires("manage_customers")
    def post(self, request, prefix: str):
        key = services.customer_key_revoke(prefix=prefix)
        return Response(rendered(serializers.CustomerKeyOut, selectors.customer_key_row(key)))
