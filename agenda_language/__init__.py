"""The agenda language, shared by the server and the worker (docs/design.md §5).

Standard library only: the server (Django) and the worker (`popclient`, installed on its own)
import the same code, so they cannot disagree about what an agenda means.

- `pointers`: JSON pointers as references use them.
- `references`: the `@<name::/json/pointer?fallback>` syntax: finding, resolving, expanding a
  template.
- `dependencies`: what each operation waits for (declared and referenced), cycles and ordering
  (`graphlib`), what a rerun resets.
- `progress`: the agenda's percent from its operations'.
"""
