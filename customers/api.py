from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from config.fields import StrictCharField
from customers.models import Customer
from customers.services import customer_create


class CustomerIn(serializers.Serializer):
    name = StrictCharField(max_length=200)
    kind = serializers.ChoiceField(choices=Customer.Kind.values)
    contact = StrictCharField(max_length=254, required=False, default="", allow_blank=True)
    id = StrictCharField(max_length=64, required=False, allow_null=True)


class CustomerCreateApi(APIView):
    def post(self, request):
        serializer = CustomerIn(data=request.data)
        serializer.is_valid(raise_exception=True)
        customer = customer_create(**serializer.validated_data)
        return Response(
            {
                "customer_id": customer.id,
                "name": customer.name,
                "kind": customer.kind,
                "contact": customer.contact,
            },
            status=status.HTTP_201_CREATED,
        )
