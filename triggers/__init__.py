"""Inbound triggers: a signed event from outside submits an agenda from a template
(docs/design.md §5.4)."""
