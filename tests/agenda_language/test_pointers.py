"""JSON pointer array indexes are ASCII decimal (RFC 6901), never other Unicode digits."""

import pytest

from agenda_language.pointers import resolve_pointer


@pytest.mark.parametrize("token", ["\u00b2", "\u0663", "\uff11", "01", "-1", "1.0"])
def test_a_token_that_is_not_an_ascii_decimal_index_does_not_resolve_in_an_array(token):
    with pytest.raises(KeyError) as raised:
        resolve_pointer(["a", "b"], f"/{token}")

    assert raised.value.args == (token,)


def test_an_ascii_decimal_index_resolves_in_an_array():
    assert resolve_pointer(["a", "b"], "/1") == "b"
    assert resolve_pointer(["a", "b"], "/0") == "a"


def test_a_superscript_digit_is_an_ordinary_key_in_an_object():
    assert resolve_pointer({"\u00b2": "squared"}, "/\u00b2") == "squared"
