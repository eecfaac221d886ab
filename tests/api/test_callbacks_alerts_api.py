"""callback-deliveries/ (+ redeliver) and alerts/ (docs/design.md §8, §10)."""

import pytest
from django.utils import timezone

from agendas.services import agenda_abort
from scheduling.models import Alert, AlertRule, CallbackDelivery

pytestmark = pytest.mark.django_db


@pytest.fixture
def with_callback_url(customer, other_customer):
    for row in (customer, other_customer):
        row.callback_url = "https://hooks.example.com/pop"
        row.save(update_fields=["callback_url"])


@pytest.fixture
def delivery(with_callback_url, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "paused")
    agenda_abort(principal=submitter.user, agenda=agenda)
    (row,) = CallbackDelivery.objects.filter(agenda=agenda, event="aborted")
    CallbackDelivery.objects.filter(pk=row.pk).update(
        status="failed", attempts=8, last_error="timeout", last_status_code=504
    )
    return row


@pytest.fixture
def foreign_delivery(with_callback_url, other_submitter, agenda_in_state):
    agenda = agenda_in_state(other_submitter, "paused")
    return CallbackDelivery.objects.get(agenda=agenda, event="paused")


def test_callback_deliveries_list_your_customers_outbox(viewer_client, delivery, foreign_delivery):
    response = viewer_client.get("/api/v1/callback-deliveries/", {"status": "failed"})

    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert (row["id"], row["event"], row["body"]["state"]) == (delivery.pk, "aborted", "aborted")


def test_an_admin_redelivers_a_failed_callback(admin_client, delivery):
    response = admin_client.post(f"/api/v1/callback-deliveries/{delivery.pk}/redeliver/")

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["attempts"]) == ("pending", 0)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("pending", 0, "")
    assert (delivery.last_status_code, delivery.delivered_at) == (None, None)
    assert delivery.next_attempt_at <= timezone.now()


def test_a_pending_callback_is_not_redelivered_409(admin_client, delivery):
    CallbackDelivery.objects.filter(pk=delivery.pk).update(status="pending", attempts=3)
    before = CallbackDelivery.objects.filter(pk=delivery.pk).values().get()

    response = admin_client.post(f"/api/v1/callback-deliveries/{delivery.pk}/redeliver/")

    assert (response.status_code, response.json()["current_state"]) == (409, "pending")
    assert CallbackDelivery.objects.filter(pk=delivery.pk).values().get() == before


def test_a_submitter_may_not_redeliver(client, delivery):
    response = client.post(f"/api/v1/callback-deliveries/{delivery.pk}/redeliver/")

    assert response.status_code == 403
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", 8)


def test_another_customers_delivery_is_404_and_stays_as_it_was(admin_client, foreign_delivery):
    before = CallbackDelivery.objects.filter(pk=foreign_delivery.pk).values().get()

    read = admin_client.get(f"/api/v1/callback-deliveries/{foreign_delivery.pk}/")
    redeliver = admin_client.post(f"/api/v1/callback-deliveries/{foreign_delivery.pk}/redeliver/")

    assert (read.status_code, redeliver.status_code) == (404, 404)
    assert CallbackDelivery.objects.filter(pk=foreign_delivery.pk).values().get() == before


def test_a_bad_status_filter_is_400(viewer_client):
    response = viewer_client.get("/api/v1/callback-deliveries/", {"status": "lost"})

    assert (response.status_code, list(response.json())) == (400, ["status"])


@pytest.fixture
def alerts(customer, other_customer, insight):
    # Alerts are written by the alerts task (its own issue); rows are made directly here.
    opened = []
    for owner in (customer, other_customer):
        rule = AlertRule.objects.create(
            customer=owner, name=f"{owner.slug} backlog", kind="queue_waiting", threshold=5
        )
        rule_with_insight = AlertRule.objects.create(
            customer=owner, name=f"{owner.slug} old", kind="oldest_ready_age", threshold=60
        )
        rule_with_insight.insight = insight
        rule_with_insight.save(update_fields=["insight"])
        opened.append(
            Alert.objects.create(
                rule=rule, customer=owner, value=9, message="9 waiting", opened_at=timezone.now()
            )
        )
    return opened


def test_alerts_list_only_your_customers_alerts(viewer_client, alerts):
    response = viewer_client.get("/api/v1/alerts/", {"state": "open"})

    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert (row["rule_name"], row["kind"], row["value"]) == ("acme backlog", "queue_waiting", 9.0)


def test_another_customers_alert_is_404(viewer_client, alerts):
    assert viewer_client.get(f"/api/v1/alerts/{alerts[1].pk}/").status_code == 404


def test_alerts_are_read_only(admin_client, alerts):
    response = admin_client.post("/api/v1/alerts/", {}, format="json")

    assert response.status_code == 405


def test_a_bad_alert_filter_is_400(viewer_client):
    response = viewer_client.get("/api/v1/alerts/", {"state": "burning"})

    assert (response.status_code, list(response.json())) == (400, ["state"])
