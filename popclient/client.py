"""REST client for POP (docs/design.md §10, §6.3, §6.4): one method per endpoint, typed errors.

Only httpx and the standard library are used, so a farm can run workers without the server.
Sending, retrying and error mapping live in :mod:`popclient.transport`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from popclient.transport import (
    API_PREFIX,
    CID_HEADER,
    IDEMPOTENCY_HEADER,
    LEASE_HEADER,
    ApiSession,
    error_from_response,
    without_none,
)
from popclient.triggers import encode_event, signed_headers

__all__ = [
    "API_PREFIX",
    "CID_HEADER",
    "IDEMPOTENCY_HEADER",
    "LEASE_HEADER",
    "PopClient",
    "error_from_response",
]


def _token_fields(name: str | None, expires_in_days: int | None, never_expires: bool) -> dict:
    body: dict[str, Any] = without_none({"name": name, "expires_in_days": expires_in_days})
    if never_expires:
        body["expires_in_days"] = None
    return body


class PopClient(ApiSession):
    """Client for one POP server.

    ``retries`` is how many times a call is repeated after a failure that is safe to
    repeat: a connection that never reached the server (every call), a 429 (every call),
    and 5xx or a broken connection for idempotent calls (GET, DELETE, reports; a repeated
    DELETE answered 404 counts as done). ``pull`` and the other POSTs, and PATCHes, are
    never repeated once the request may have reached the server.
    """

    # -- authentication -----------------------------------------------------------------

    def obtain_token(self, username: str, password: str, *, name: str | None = None) -> str:
        """Exchange a username and password for a new API token named ``name`` (server
        default ``login``) and use it from now on."""
        body = self.request(
            "POST",
            "auth/token/",
            json=without_none({"username": username, "password": password, "name": name}),
            authenticated=False,
        )
        token = body["token"]
        self.token = token
        return token

    # -- agendas ------------------------------------------------------------------------

    def submit_agenda(
        self, agenda: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> Any:
        """Submit one ready-to-run agenda (docs/design.md §5.1); returns the created agenda."""
        headers = {IDEMPOTENCY_HEADER: idempotency_key} if idempotency_key else None
        # With an idempotency key a repeat returns the first agenda, so 5xx may be retried.
        return self._post(
            "agendas/", dict(agenda), headers=headers, idempotent=bool(idempotency_key)
        )

    def submit_agendas_bulk(self, agendas: list[Mapping[str, Any]]) -> list[Any]:
        """Submit up to 1000 agendas; one result per item, the agenda or ``{"errors": …}``."""
        body = self._post("agendas/bulk/", {"agendas": [dict(a) for a in agendas]})
        return body.get("results", []) if isinstance(body, dict) else body

    def list_agendas(self, **filters: Any) -> Any:
        """One page of agendas: ``{count, next, previous, results}``.

        Filters: ``link_id``, ``cid``, ``customer``, ``state``, ``insight``, ``template``,
        ``external_id``, ``label`` (``"key:value"`` or a list of them, all must match),
        ``created_after``, ``created_before``, ``ordering``, ``limit``, ``offset``.
        """
        return self._get("agendas/", **filters)

    def iter_agendas(self, **filters: Any) -> Iterator[dict[str, Any]]:
        return self.paginate("agendas/", **filters)

    def get_agenda(self, agenda_id: str) -> Any:
        """The agenda with its embedded ``progress`` (and ``state`` repeated at top level)."""
        return self._get(f"agendas/{agenda_id}/")

    def abort_agenda(self, agenda_id: str) -> Any:
        return self._post(f"agendas/{agenda_id}/abort/")

    def pause_agenda(self, agenda_id: str, *, now: bool = False) -> Any:
        """Pause; an executing agenda after its running operations, or with ``now`` at once
        (its worker stops them and keeps their progress for the resume)."""
        return self._post(f"agendas/{agenda_id}/pause/", {"mode": "now"} if now else None)

    def resume_agenda(self, agenda_id: str) -> Any:
        return self._post(f"agendas/{agenda_id}/resume/")

    def rerun_agenda(
        self,
        agenda_id: str,
        *,
        mode: str = "continue",
        operations: list[str] | None = None,
        skip_execution: bool | None = None,
    ) -> Any:
        """Rerun an agenda: mode ``continue``, ``reset_all`` or ``operations_to_reset``."""
        body = without_none(
            {"mode": mode, "operations": operations, "skip_execution": skip_execution}
        )
        return self._post(f"agendas/{agenda_id}/rerun/", body)

    def act_on_agendas(
        self,
        action: str,
        *,
        filter: dict[str, Any] | None = None,
        ids: list[str] | None = None,
        mode: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Abort, pause, resume or rerun every agenda ``filter`` matches (the list's filters:
        ``{"state": ["failed"], "label": ["batch:42"]}``) or the given ``ids``. A dry run
        answers ``{matched, would_change}``; otherwise the answer is the job (``id``,
        ``status``, ``matched``, ``processed``, ``changed``, ``skipped``, ``done``)."""
        body = without_none({"action": action, "filter": filter, "ids": ids, "mode": mode})
        body["dry_run"] = dry_run
        return self._post("agendas/actions/", body)

    def get_agenda_action(self, job_id: str) -> Any:
        """A job of actions on a set, as it progresses."""
        return self._get(f"agendas/actions/{job_id}/")

    def list_agenda_actions(self, **params: Any) -> Any:
        """Your jobs of actions on a set (staff: everyone's), newest first."""
        return self._get("agendas/actions/", **params)

    def list_executions(self, agenda_id: str, **params: Any) -> Any:
        return self._get(f"agendas/{agenda_id}/executions/", **params)

    def progress_summary(self, link_id: str) -> Any:
        return self._get("progress-summary/", link_id=link_id)

    def list_agenda_progress(self, **filters: Any) -> Any:
        return self._get("agenda-progress/", **filters)

    def get_agenda_progress(self, progress_id: str) -> Any:
        return self._get(f"agenda-progress/{progress_id}/")

    def list_operation_progress(self, **filters: Any) -> Any:
        return self._get("operation-progress/", **filters)

    def get_operation_progress(self, progress_id: str) -> Any:
        return self._get(f"operation-progress/{progress_id}/")

    # -- templates ----------------------------------------------------------------------

    def list_templates(self, **filters: Any) -> Any:
        return self._get("agenda-templates/", **filters)

    def get_template(self, template_id: str) -> Any:
        return self._get(f"agenda-templates/{template_id}/")

    def create_template(self, **fields: Any) -> Any:
        """Create a template: ``name``, ``agenda``, ``description``, ``payload_schema``,
        ``static_parameters``, ``customer``, ``is_global``, ``allowed_customers``."""
        return self._post("agenda-templates/", without_none(fields))

    def update_template(self, template_id: str, **fields: Any) -> Any:
        """Change the named fields of a template (PATCH); returns the template."""
        return self._patch(f"agenda-templates/{template_id}/", fields)

    def delete_template(self, template_id: str) -> None:
        self._delete(f"agenda-templates/{template_id}/")

    def run_template(self, template_id: str, payload: Any = None, **fields: Any) -> Any:
        """Run a template with ``payload`` (plus ``link_id``, ``priority``, …); 201 → agenda."""
        body = without_none(fields)
        body["payload"] = payload if payload is not None else {}
        return self._post(f"agenda-templates/{template_id}/run/", body)

    def preview_template(self, template_id: str, payload: Any = None, **fields: Any) -> Any:
        """The expanded agenda a run would submit, without submitting it."""
        body = without_none(fields)
        body["payload"] = payload if payload is not None else {}
        return self._post(f"agenda-templates/{template_id}/preview/", body, idempotent=True)

    def list_template_versions(self, template_id: str, **params: Any) -> Any:
        """The template's versions, newest first: ``number``, ``author``, ``note``,
        ``created_at`` (a page: ``limit``, ``offset``)."""
        return self._get(f"agenda-templates/{template_id}/versions/", **params)

    def get_template_version(self, template_id: str, number: int) -> Any:
        """One version of a template, with its ``agenda``, ``static_parameters`` and
        ``payload_schema``."""
        return self._get(f"agenda-templates/{template_id}/versions/{int(number)}/")

    def diff_template_versions(self, template_id: str, old: int, new: int) -> Any:
        """What changed from version ``old`` to ``new``: ``{"from", "to", "changed",
        "diff"}``, ``diff`` being unified-diff lines."""
        return self._get(
            f"agenda-templates/{template_id}/versions/diff/", **{"from": old, "to": new}
        )

    # -- schedules ----------------------------------------------------------------------

    def list_schedules(self, **filters: Any) -> Any:
        return self._get("schedules/", **filters)

    def get_schedule(self, schedule_id: str) -> Any:
        return self._get(f"schedules/{schedule_id}/")

    def create_schedule(self, **fields: Any) -> Any:
        """Create a cron schedule: ``name``, ``template``, ``cron``, ``payload``, ``timezone``…"""
        return self._post("schedules/", without_none(fields))

    def update_schedule(self, schedule_id: str, **fields: Any) -> Any:
        """Change the named fields of a schedule (PATCH); returns the schedule."""
        return self._patch(f"schedules/{schedule_id}/", fields)

    def delete_schedule(self, schedule_id: str) -> None:
        self._delete(f"schedules/{schedule_id}/")

    def pause_schedule(self, schedule_id: str) -> Any:
        return self._post(f"schedules/{schedule_id}/pause/")

    def resume_schedule(self, schedule_id: str) -> Any:
        return self._post(f"schedules/{schedule_id}/resume/")

    def trigger_schedule(self, schedule_id: str) -> Any:
        return self._post(f"schedules/{schedule_id}/trigger/")

    def schedule_runs(self, schedule_id: str, **params: Any) -> Any:
        return self._get(f"schedules/{schedule_id}/runs/", **params)

    # -- triggers -------------------------------------------------------------------------

    def list_triggers(self, **filters: Any) -> Any:
        return self._get("triggers/", **filters)

    def get_trigger(self, trigger_id: str) -> Any:
        return self._get(f"triggers/{trigger_id}/")

    def create_trigger(self, **fields: Any) -> Any:
        """Create an inbound trigger; the answer holds its ``secret``, shown this once."""
        return self._post("triggers/", without_none(fields))

    def update_trigger(self, trigger_id: str, **fields: Any) -> Any:
        return self._patch(f"triggers/{trigger_id}/", fields)

    def delete_trigger(self, trigger_id: str) -> None:
        self._delete(f"triggers/{trigger_id}/")

    def rotate_trigger_secret(self, trigger_id: str) -> Any:
        return self._post(f"triggers/{trigger_id}/rotate-secret/")

    def trigger_firings(self, trigger_id: str, **params: Any) -> Any:
        return self._get(f"triggers/{trigger_id}/firings/", **params)

    def fire_trigger(
        self,
        trigger_id: str,
        secret: str,
        event: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
    ) -> Any:
        """Fire a trigger with ``event`` signed by ``secret`` (no API token is sent); a refusal
        raises like any call. Not retried: see popclient.triggers.fire."""
        body = encode_event(dict(event))
        headers = signed_headers(secret, body, idempotency_key=idempotency_key)
        response = self._http.post(
            f"{API_PREFIX}/triggers/{trigger_id}/fire/", content=body, headers=headers
        )
        if not response.is_success:
            raise error_from_response(response)
        return response.json()

    # -- callbacks and alerts -----------------------------------------------------------

    def list_callback_deliveries(self, **filters: Any) -> Any:
        """One page of the callback outbox. Filters: ``agenda``, ``link_id``, ``cid``,
        ``customer``, ``status``, ``event``, ``created_after``, ``created_before``."""
        return self._get("callback-deliveries/", **filters)

    def get_callback_delivery(self, delivery_id: int | str) -> Any:
        return self._get(f"callback-deliveries/{delivery_id}/")

    def redeliver_callback(self, delivery_id: int | str) -> Any:
        """Queue a callback again now with a fresh set of attempts; returns the delivery."""
        return self._post(f"callback-deliveries/{delivery_id}/redeliver/")

    def list_alerts(self, **filters: Any) -> Any:
        """One page of alerts. Filters: ``customer``, ``state``, ``rule``, ``insight``,
        ``opened_after``."""
        return self._get("alerts/", **filters)

    def get_alert(self, alert_id: str) -> Any:
        return self._get(f"alerts/{alert_id}/")

    # -- facility -----------------------------------------------------------------------

    def queues(self, **filters: Any) -> Any:
        """Per insight: queue_size, queued, ready, executing, oldest ready age, per customer."""
        return self._get("queues/", **filters)

    def get_queue(self, insight_id: str) -> Any:
        """The queue figures of one insight."""
        return self._get(f"queues/{insight_id}/")

    def list_resource_pools(self, **filters: Any) -> Any:
        return self._get("resource-pools/", **filters)

    def get_resource_pool(self, pool_id: str) -> Any:
        return self._get(f"resource-pools/{pool_id}/")

    def create_resource_pool(self, **fields: Any) -> Any:
        """Create a pool: ``name``, ``owner`` (customer id or slug), ``description``."""
        return self._post("resource-pools/", without_none(fields))

    def update_resource_pool(self, pool_id: str, **fields: Any) -> Any:
        """Change the named fields of a pool (PATCH); returns the pool."""
        return self._patch(f"resource-pools/{pool_id}/", fields)

    def delete_resource_pool(self, pool_id: str) -> None:
        """Delete a pool and its insights."""
        self._delete(f"resource-pools/{pool_id}/")

    def list_insights(self, **filters: Any) -> Any:
        return self._get("insights/", **filters)

    def get_insight(self, insight_id: str) -> Any:
        return self._get(f"insights/{insight_id}/")

    def create_insight(self, **fields: Any) -> Any:
        """Create an insight: ``resource_pool`` (id or name), ``name``, ``mappers``,
        ``queue_size``, ``scheduling_algorithm``, ``lease_seconds``, ``is_global``, …"""
        return self._post("insights/", without_none(fields))

    def update_insight(self, insight_id: str, **fields: Any) -> Any:
        """Change the named fields of an insight (PATCH); returns the insight."""
        return self._patch(f"insights/{insight_id}/", fields)

    def delete_insight(self, insight_id: str) -> None:
        self._delete(f"insights/{insight_id}/")

    # -- customers, members and tokens --------------------------------------------------

    def list_customers(self, **filters: Any) -> Any:
        return self._get("customers/", **filters)

    def get_customer(self, customer_id: str) -> Any:
        return self._get(f"customers/{customer_id}/")

    def create_customer(self, **fields: Any) -> Any:
        """Create a customer (staff): ``name``, ``slug``, ``resource_pool``, …"""
        return self._post("customers/", without_none(fields))

    def update_customer(self, customer_id: str, **fields: Any) -> Any:
        """Change the named fields (PATCH); a customer's admin may set its callbacks."""
        return self._patch(f"customers/{customer_id}/", fields)

    def delete_customer(self, customer_id: str) -> None:
        """Delete a customer (staff)."""
        self._delete(f"customers/{customer_id}/")

    def list_members(self, customer_id: str, **filters: Any) -> Any:
        """One page of the customer's memberships (customer admin)."""
        return self._get(f"customers/{customer_id}/members/", **filters)

    def get_member(self, customer_id: str, member_id: int | str) -> Any:
        return self._get(f"customers/{customer_id}/members/{member_id}/")

    def add_member(
        self,
        customer_id: str,
        username: str,
        role: str,
        *,
        email: str | None = None,
        password: str | None = None,
    ) -> Any:
        """Add a member with ``role`` (viewer, submitter, admin, worker); a new username
        creates the user (``email``/``password`` for a new user only)."""
        body = without_none(
            {"username": username, "role": role, "email": email, "password": password}
        )
        return self._post(f"customers/{customer_id}/members/", body)

    def update_member(self, customer_id: str, member_id: int | str, *, role: str) -> Any:
        """Change a member's role; returns the membership."""
        return self._patch(f"customers/{customer_id}/members/{member_id}/", {"role": role})

    def remove_member(self, customer_id: str, member_id: int | str) -> None:
        self._delete(f"customers/{customer_id}/members/{member_id}/")

    def issue_token(
        self,
        customer_id: str,
        member_id: int | str,
        *,
        name: str | None = None,
        expires_in_days: int | None = None,
        never_expires: bool = False,
    ) -> Any:
        """A new API token for the member, replacing their token of the same name (server
        default ``api``): ``{token, id, name, username, expiry, …}``; the key is shown once."""
        body = _token_fields(name, expires_in_days, never_expires)
        return self._post(f"customers/{customer_id}/members/{member_id}/token/", body)

    def revoke_token(self, customer_id: str, member_id: int | str) -> int:
        """Revoke all of the member's API tokens; returns how many were revoked."""
        body = self.request("DELETE", f"customers/{customer_id}/members/{member_id}/token/")
        return int(body.get("revoked", 0)) if isinstance(body, dict) else 0

    def list_member_tokens(self, customer_id: str, member_id: int | str) -> list[Any]:
        """The member's API tokens (customer admin): names, expiry, last use; never keys."""
        return self._get(f"customers/{customer_id}/members/{member_id}/tokens/")

    def revoke_member_token(self, customer_id: str, member_id: int | str, token_id: str) -> None:
        """Revoke one of the member's API tokens (customer admin)."""
        self._delete(f"customers/{customer_id}/members/{member_id}/tokens/{token_id}/")

    # -- audit trail ---------------------------------------------------------------------

    def list_audit_events(self, **filters: Any) -> Any:
        """One page of the audit trail, newest first (a customer's admin: that customer's;
        staff: all). Filters: ``customer``, ``action``, ``user``, ``token_name``,
        ``target_type``, ``target_id``, ``since``, ``until``."""
        return self._get("audit-events/", **filters)

    def iter_audit_events(self, **filters: Any) -> Iterator[dict[str, Any]]:
        return self.paginate("audit-events/", **filters)

    def get_audit_event(self, event_id: int | str) -> Any:
        return self._get(f"audit-events/{event_id}/")

    # -- your own API tokens ------------------------------------------------------------

    def list_tokens(self, **filters: Any) -> Any:
        """One page of your API tokens (staff: everyone's; filters ``user``, ``name``)."""
        return self._get("tokens/", **filters)

    def iter_tokens(self, **filters: Any) -> Iterator[dict[str, Any]]:
        return self.paginate("tokens/", **filters)

    def get_token(self, token_id: str) -> Any:
        """One API token (yours; staff: anyone's), without its key."""
        return self._get(f"tokens/{token_id}/")

    def create_token(
        self, name: str, *, expires_in_days: int | None = None, never_expires: bool = False
    ) -> Any:
        """A new API token of yours: ``{token, id, name, expiry, …}``; the key is shown once.

        Without ``expires_in_days`` it lives the server's default lifetime."""
        return self._post("tokens/", _token_fields(name, expires_in_days, never_expires))

    def delete_token(self, token_id: str) -> None:
        """Revoke one API token (yours; staff: anyone's)."""
        self._delete(f"tokens/{token_id}/")

    # -- pullers (docs/design.md §6.3, §6.4) ----------------------------------------------------

    def pull(
        self,
        insight_id: str,
        count: int = 1,
        worker: str = "popclient",
        wait_seconds: float = 0,
        request_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Lease up to ``count`` queued agendas; long-polls up to ``wait_seconds``.

        Each item is ``{"agenda", "progress", "execution": {id, lease_token,
        lease_expires_at, lease_seconds, number}}``. With a ``request_id`` (new for every
        pull) a lost answer is asked for again with the same id, and the server answers with
        the executions it leased the first time; without one a pull is never retried (a lost
        answer would lease agendas to nobody until their leases expire).
        """
        fields: dict[str, Any] = {"count": count, "worker": worker, "wait_seconds": wait_seconds}
        if request_id:
            fields["request_id"] = request_id
        body = self.request(
            "POST",
            f"insights/{insight_id}/pull/",
            json=fields,
            idempotent=bool(request_id),
            timeout=max(self.timeout, float(wait_seconds) + 15.0),
        )
        if isinstance(body, dict):
            return list(body.get("agendas") or [])
        return list(body or [])

    def report(
        self, execution_id: str, lease_token: str, *, cid: str | None = None, **fields: Any
    ) -> Any:
        """Report progress for one execution; an empty report is a heartbeat.

        Fields: ``percent_complete``, ``message``, ``operations``, ``state``,
        ``diagnostics``. Returns ``{"abort", "pause", "lease_expires_at"}``; a stale
        execution raises :class:`Conflict`. Reports are retried: repeating one is harmless.
        """
        return self.request(
            "POST",
            f"executions/{execution_id}/report/",
            json=without_none(fields),
            headers={LEASE_HEADER: lease_token},
            idempotent=True,
            cid=cid,
        )

    def report_batch(self, reports: list[Mapping[str, Any]]) -> list[Any]:
        """Send up to 100 reports ``{execution, lease_token, …}`` in one call; per-item results."""
        body = self.request(
            "POST",
            "executions/report/",
            json={"reports": [without_none(r) for r in reports]},
            idempotent=True,
        )
        return body.get("results", []) if isinstance(body, dict) else list(body or [])

    def add_operations(
        self,
        execution_id: str,
        lease_token: str,
        operations: list[Mapping[str, Any]],
        *,
        cid: str | None = None,
    ) -> Any:
        """Append generated operations to the running agenda of this execution."""
        return self.request(
            "POST",
            f"executions/{execution_id}/operations/",
            json={"operations": [dict(op) for op in operations]},
            headers={LEASE_HEADER: lease_token},
            idempotent=False,
            cid=cid,
        )
