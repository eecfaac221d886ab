"""The audit trail grows with every action: its list's first page and capped count read by
index for staff and for a customer's admin, with every documented filter, whatever the trail
holds (docs/design.md §10.4)."""

import pytest
from django.db import connection

from audit.models import AuditEvent
from tests.query_plans import assert_list_reads_by_index, assert_no_match_reads_few_pages

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="query plans are PostgreSQL's"),
]

TRAIL = "audit_auditevent"
FILTERS = [
    "",
    "?action=nobody",
    "?user=nobody",
    "?token_name=nobody",
    "?target_type=nobody",
    "?target_id=nobody",
    "?customer=00000000-0000-0000-0000-000000000000",
    "?since=2099-01-01T00:00:00Z",
]


@pytest.fixture
def trail(customer, admin_member):
    """20,000 events of the customer, all alike, analysed."""
    table = connection.ops.quote_name(AuditEvent._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (id, created_at, customer_id, user_id, username, token_name, "
            "action, target_type, target_id, detail, cid) "
            "SELECT gen_random_uuid(), now() - n * interval '1 second', %s, %s, %s, 'ci', "
            "'agenda.submit', 'agendas.agenda', gen_random_uuid()::text, '{}', '' "
            "FROM generate_series(1, 20000) AS n",
            [customer.pk, admin_member.user.pk, admin_member.user.username],
        )
        cursor.execute(f"ANALYZE {table}")


@pytest.mark.parametrize("who", ["staff", "customer"])
def test_the_audit_list_reads_its_page_and_its_count_by_index_and_no_match_in_a_few_pages(
    who, trail, admin_member, staff_user, api_client_for
):
    caller = api_client_for(staff_user if who == "staff" else admin_member)
    for query in FILTERS:
        url = f"/api/v1/audit-events/{query}"
        assert_list_reads_by_index(caller, url, (TRAIL,))
        if query:  # every filter here is one no event matches
            assert_no_match_reads_few_pages(caller, url, (TRAIL,))
