"""JSON pointers as `@<name::pointer>` references use them: RFC 6901 tokens, a leading `/`
optional, `""` or `/` alone meaning the whole document."""

from collections.abc import Mapping
from typing import Any


def pointer_tokens(pointer: str | None) -> list[str]:
    """Split a pointer into unescaped tokens (`~1` is `/`, `~0` is `~`)."""
    if pointer is None or pointer in ("", "/"):
        return []
    if not pointer.startswith("/"):
        pointer = "/" + pointer
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def follow_tokens(document: Any, tokens: list[str]) -> Any:
    """Walk `tokens` into `document`; raise KeyError naming the token that does not resolve.

    Array indexes are ASCII decimal without leading zeros and inside the array."""
    current = document
    for token in tokens:
        if isinstance(current, Mapping) and token in current:
            current = current[token]
        elif (
            isinstance(current, list)
            and token.isascii()  # "²".isdigit() holds, but int("²") raises
            and token.isdigit()
            and (token == "0" or not token.startswith("0"))
            and int(token) < len(current)
        ):
            current = current[int(token)]
        else:
            raise KeyError(token)
    return current


def resolve_pointer(document: Any, pointer: str | None) -> Any:
    """The value `pointer` names in `document`; KeyError when it does not resolve."""
    return follow_tokens(document, pointer_tokens(pointer))
