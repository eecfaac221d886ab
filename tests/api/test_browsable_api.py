"""The browsable API (DRF's HTML renderer, on for people exploring the API in a browser) draws
every list with its filter form: a filter widget without a template was a 500."""

import pytest

from popsite.api_urls import router

pytestmark = pytest.mark.django_db


def test_every_list_endpoint_draws_in_the_browsable_api_for_staff(staff_client):
    broken = []
    for prefix, _viewset, _basename in router.registry:
        if "(?P<" in prefix:  # nested under one object: not a top-level list
            continue
        response = staff_client.get(f"/api/v1/{prefix}/", HTTP_ACCEPT="text/html")
        if response.status_code != 200:
            broken.append((prefix, response.status_code))

    assert broken == []
