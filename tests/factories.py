"""Reference rows only; anything with a state is created through the services."""

import factory
from django.contrib.auth import get_user_model

from agendas.models import AgendaTemplate
from resourcepools.models import Customer, Insight, Membership, ResourcePool


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ["username"]

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("secret-password")


class CustomerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Customer

    name = factory.Sequence(lambda n: f"Customer {n}")
    slug = factory.Sequence(lambda n: f"customer-{n}")


class ResourcePoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ResourcePool

    name = factory.Sequence(lambda n: f"pool-{n}")
    owner = factory.SubFactory(CustomerFactory)


class InsightFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Insight

    resource_pool = factory.SubFactory(ResourcePoolFactory)
    name = factory.Sequence(lambda n: f"insight-{n}")
    mappers = factory.LazyFunction(lambda: {"operation_type": ["mediainfo", "log", "sleep"]})
    is_global = True
    # Tests that count turns rely on round robin's exact order; fair share has its own tests.
    scheduling_algorithm = Insight.Algorithm.ROUND_ROBIN


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    customer = factory.SubFactory(CustomerFactory)
    role = Membership.Role.SUBMITTER


class AgendaTemplateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AgendaTemplate

    customer = factory.SubFactory(CustomerFactory)
    name = factory.Sequence(lambda n: f"template-{n}")
    agenda = factory.LazyFunction(
        lambda: {
            "operations": [
                {"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}}
            ]
        }
    )
