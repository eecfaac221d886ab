"""Request body parsing: the size and nesting limits every API body passes (JSON only).

Its own module, free of rest_framework.views, because DRF imports DEFAULT_PARSER_CLASSES
while it defines APIView.
"""

import json
import re
from itertools import accumulate
from typing import Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils.json import strict_constant


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is larger than 1 MiB."
    default_code = "payload_too_large"


def body_limit() -> int:
    return settings.POP_MAX_BODY_BYTES


class JSONTooDeep(ValueError):
    """JSON text nests arrays and objects deeper than POP_MAX_JSON_DEPTH."""


JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
BRACKET_STEP = [0] * 256
BRACKET_STEP[ord("[")] = BRACKET_STEP[ord("{")] = 1
BRACKET_STEP[ord("]")] = BRACKET_STEP[ord("}")] = -1


def json_depth(text: str, limit: int) -> int:
    """How deep JSON text nests arrays and objects, read without parsing (no recursion).

    Brackets inside strings do not count. Text with no more than `limit` opening brackets
    cannot be deeper than `limit`: that count is the answer then, without the scan.
    """
    opening = text.count("[") + text.count("{")
    if opening <= limit:
        return opening
    brackets = NOT_A_BRACKET.sub("", JSON_STRING.sub("", text)).encode("ascii")
    return max(accumulate(map(BRACKET_STEP.__getitem__, brackets)), default=0)


def json_loads_limited(text: str) -> Any:
    """`json.loads` (NaN and Infinity refused) that raises JSONTooDeep, before parsing, for
    text nested deeper than POP_MAX_JSON_DEPTH: Python's parser, and everything that walks
    the result, recurses once per level and would fail with RecursionError (a 500)."""
    limit = settings.POP_MAX_JSON_DEPTH
    if json_depth(text, limit) > limit:
        raise JSONTooDeep(f"JSON nested deeper than {limit} levels.")
    return json.loads(text, parse_constant=strict_constant)


class LimitedJSONParser(JSONParser):
    """JSON parser that refuses bodies over the size limit with 413, and bodies nested deeper
    than POP_MAX_JSON_DEPTH with 400.

    DRF hands the raw WSGI stream to its parsers, so Django's DATA_UPLOAD_MAX_MEMORY_SIZE
    (which guards `request.body` and form parsing) never sees a JSON body. It is every API
    view's only parser (PopViewMixin and DEFAULT_PARSER_CLASSES).
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = body_limit()
        data = stream.read(limit + 1)
        if len(data) > limit:
            raise PayloadTooLarge()
        encoding = get_encoding(parser_context or {})
        try:
            return json_loads_limited(data.decode(encoding))
        except JSONTooDeep as error:
            raise exceptions.ParseError(str(error)) from error
        except ValueError as error:  # also UnicodeDecodeError
            raise exceptions.ParseError(f"JSON parse error - {error}") from error
