import json

from django import template

from audit.selectors import audit_reader

register = template.Library()


@register.filter
def reads_audit(user: object) -> bool:
    """Whether the navigation offers the Audit page: staff and customer admins."""
    return bool(getattr(user, "is_authenticated", False)) and audit_reader(user)


@register.filter
def detail_text(detail: object, limit: int = 160) -> str:
    """An event's detail as compact JSON, cut to `limit` characters."""
    text = json.dumps(detail, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
