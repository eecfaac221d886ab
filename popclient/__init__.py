"""POP client: REST client, reference worker (puller + DAG executor + handlers), CLI ``pop``.

Standalone: depends on httpx and the standard library only, never on the server's code.
"""

__version__ = "0.1.0"
