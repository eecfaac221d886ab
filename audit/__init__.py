"""Audit trail: who changed what, when, for which customer and from where."""
