from __future__ import annotations

import factory

from customers.models import Customer


class CustomerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Customer

    id = factory.Sequence(lambda n: f"CUST-TEST{n:06d}")
    name = factory.Sequence(lambda n: f"Customer {n}")
    kind = Customer.Kind.OEM
    contact = factory.LazyAttribute(lambda c: f"ops@{c.id.lower()}.example")
