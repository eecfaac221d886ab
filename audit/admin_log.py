"""Admin additions, changes and deletions (django.contrib.admin's LogEntry) as audit events.

The admin writes a LogEntry for every add, change and delete it makes, inside the same
transaction in its add, change and delete views. One LogEntry is saved (post_save); several
at once (the "delete selected" action) are bulk-created, which sends no signal, so
`log_actions` is wrapped to record those too. Admin actions that call services (abort
selected, ...) are recorded by the services themselves.
"""

import functools
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry, LogEntryManager
from django.core.exceptions import ValidationError

from audit.models import AuditEvent
from audit.services import audit_record, customer_id_of

ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


def _customer_id(entry: LogEntry) -> Any:
    """The customer of the logged object, when it still exists and has one."""
    model = entry.content_type.model_class() if entry.content_type_id else None
    if model is None or model is AuditEvent or not entry.object_id:
        return None
    try:
        row = model._default_manager.filter(pk=entry.object_id).first()
    except (ValueError, TypeError, ValidationError):
        return None
    return None if row is None else customer_id_of(None, row)


def record_admin_entry(entry: LogEntry) -> AuditEvent:
    """One audit event for one admin LogEntry (its user is the actor)."""
    content_type = entry.content_type
    kind = f"{content_type.app_label}.{content_type.model}" if content_type else ""
    return audit_record(
        action=ACTIONS.get(entry.action_flag, "admin.other"),
        customer=_customer_id(entry),
        target=(kind, entry.object_id),
        detail={"object": entry.object_repr, "change": entry.get_change_message()},
        principal=entry.user,
    )


def log_entry_saved(sender: type, instance: LogEntry, created: bool, **kwargs: Any) -> None:
    if created and not kwargs.get("raw"):
        record_admin_entry(instance)


def _recording_bulk(log_actions: Any) -> Any:
    @functools.wraps(log_actions)
    def wrapper(self: LogEntryManager, *args: Any, **kwargs: Any) -> Any:
        entries = log_actions(self, *args, **kwargs)
        if isinstance(entries, list) and len(entries) > 1:  # bulk_create: no post_save
            for entry in entries:
                record_admin_entry(entry)
        return entries

    wrapper.audit_recording = True
    return wrapper


def connect() -> None:
    """Record every admin LogEntry from now on (called once, from AuditConfig.ready)."""
    from django.db.models.signals import post_save

    post_save.connect(log_entry_saved, sender=LogEntry, dispatch_uid="audit.log_entry_saved")
    if not getattr(LogEntryManager.log_actions, "audit_recording", False):
        LogEntryManager.log_actions = _recording_bulk(LogEntryManager.log_actions)
