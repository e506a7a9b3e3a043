"""JSON bytes as Go's encoding/json writes them (escapes, floats, indentation)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.server.monitor.gojson import JsonValue, dumps, go_float, go_string


def test_html_characters_are_escaped_like_go() -> None:
    assert go_string("foo.>") == '"foo.\\u003e"'
    assert go_string("<a&b>") == '"\\u003ca\\u0026b\\u003e"'
    assert go_string("line\u2028sep\u2029") == '"line\\u2028sep\\u2029"'


def test_control_characters_use_short_escapes_where_go_has_them() -> None:
    assert go_string('"\\\n\r\t\b\f') == '"\\"\\\\\\n\\r\\t\\b\\f"'
    assert go_string("\x00\x1f") == '"\\u0000\\u001f"'


def test_non_ascii_text_is_raw_utf8() -> None:
    assert dumps("717µs") == '"717µs"'.encode()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2.0, "2"),
        (0.0, "0"),
        (0.125, "0.125"),
        (0.7142857142857143, "0.7142857142857143"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (1e-6, "0.000001"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (-3.25, "-3.25"),
        (123456789.0, "123456789"),
    ],
)
def test_floats_use_gos_shortest_form(value: float, text: str) -> None:
    assert go_float(value) == text


def test_indentation_matches_marshal_indent() -> None:
    value: JsonValue = {"a": [1, "x"], "b": {}, "c": [], "d": {"e": None, "f": True}}
    assert dumps(value) == (
        b'{\n  "a": [\n    1,\n    "x"\n  ],\n  "b": {},\n  "c": [],\n'
        b'  "d": {\n    "e": null,\n    "f": true\n  }\n}'
    )


def test_compact_matches_marshal() -> None:
    assert dumps({"status": "ok", "errors": [{"type": "JETSTREAM"}]}, indented=False) == (
        b'{"status":"ok","errors":[{"type":"JETSTREAM"}]}'
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def as_floats(value: object) -> object:
    """Numbers compared as floats: Go writes 2.0 as `2`, which a parser reads back as an int."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [as_floats(item) for item in value]
    assert isinstance(value, dict)
    return {key: as_floats(item) for key, item in value.items()}


@given(json_values)
def test_any_value_round_trips_through_a_standard_json_parser(value: JsonValue) -> None:
    expected = as_floats(json.loads(json.dumps(value)))
    assert as_floats(json.loads(dumps(value))) == expected
    assert as_floats(json.loads(dumps(value, indented=False))) == expected


def test_a_lone_surrogate_becomes_the_replacement_character_like_invalid_utf8_in_go() -> None:
    assert go_string("a\ud800b") == '"a\ufffdb"'
    assert dumps("\udfff") == '"\ufffd"'.encode()
