"""POP client: REST client, reference worker (puller + DAG executor + handlers), CLI ``pop``.

Standalone: depends on httpx and the standard library only, never on the server's code.
"""

__version__ = "0.1.0"

from popclient.client import PopClient  # noqa: E402 - needs __version__ defined first
from popclient.errors import (  # noqa: E402
    Conflict,
    Forbidden,
    NotFound,
    PopError,
    Unauthorized,
    ValidationFailed,
)

__all__ = [
    "Conflict",
    "Forbidden",
    "NotFound",
    "PopClient",
    "PopError",
    "Unauthorized",
    "ValidationFailed",
    "__version__",
]
