"""check_syntax (C-scanner skips over proven-valid spans) words every syntax error as the
token-by-token scanner does, and a long body with its error at the end costs a few C passes."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.jetstream import jsonscan
from appliance.jetstream.jsonscan import JsonSyntaxError, build_value, check_syntax

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=25,
)
junk = st.sampled_from(
    [b"x", b"}", b"]", b",", b":", b'"', b"\\", b"-", b"1.", b"0", b"e", b"tru", b"NaN", b"\x00", b"\xc3",
     b" ", b"[", b"{", b'\\u12', b"01", b",]", b"-0", b"1e+", b"\n"]
)


def outcome(fn, data: bytes) -> tuple[str, object]:
    try:
        result = fn(data)
    except JsonSyntaxError as exc:
        return "error", exc.decoder_text()
    return "ok", result


def both(data: bytes) -> tuple[tuple[str, object], tuple[str, object]]:
    text = data.decode("latin-1")
    checked = outcome(lambda d: check_syntax(d, text, 0), data)
    built = outcome(lambda d: build_value(d, 0)[1], data)
    return checked, built


@settings(max_examples=400, deadline=None)
@given(json_values, st.lists(st.tuples(st.floats(0, 1), junk), max_size=3), st.booleans())
def test_check_syntax_words_errors_as_the_exact_scanner(value, edits, spaced) -> None:
    data = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":")).encode()
    for where, piece in edits:
        cut = int(where * len(data))
        data = data[:cut] + piece + data[cut:]
    checked, built = both(data)
    assert checked == built, data


def test_cases_around_numbers_and_literals() -> None:
    for data in [b"[1.x]", b"[1,2,01]", b"[1e]", b"[-]", b"[truex]", b'{"a":1,"b":[1,2,}', b"[[1],[2],[x]]",
                 b'["a,b", x]', b'[[1,2,3,x]]', b"[NaN]", b"[1" + b"0" * 5000 + b"x]", b"[" * 20 + b"]" * 19,
                 b"[" * 10_001 + b"]" * 10_001, b"[1]" + b"[" * 10_001]:
        checked, built = both(data)
        assert checked == built, data


def test_a_long_body_with_an_error_at_its_end_is_not_read_token_by_token(monkeypatch) -> None:
    calls = 0
    value_start = jsonscan._value_start

    def counting(*args):
        nonlocal calls
        calls += 1
        return value_start(*args)

    monkeypatch.setattr(jsonscan, "_value_start", counting)
    nested = b'{"name":"X","subjects":[' + b",".join([b"[1]"] * 50_000) + b'],"x":}'
    flat = b"[" + b",".join([b"12345"] * 50_000) + b",1x]"
    for data in (nested, flat):
        calls = 0
        try:
            jsonscan.scan_value(data, 0)
        except JsonSyntaxError:
            pass
        else:
            raise AssertionError("no syntax error")
        assert calls < 20, calls  # token by token: one call per element (50,000 and more)


def test_the_c_scanners_verdict_on_the_whole_body_is_not_sought_again(monkeypatch) -> None:
    """decode_into's fast path already ran the C scanner over the body: its failure position is
    handed to the syntax check, which then probes only the tail (a C pass over 1 MB is ~0.1 s)."""
    from appliance.jetstream.api_streams import STREAM_TYPE
    from appliance.jetstream.decode import decode_into
    from appliance.jetstream.errors import JsApiError

    passes = 0
    c_scan = jsonscan._c_scan

    def counting(*args):
        nonlocal passes
        passes += 1
        return c_scan(*args)

    monkeypatch.setattr(jsonscan, "_c_scan", counting)
    body = b'{"name":"X","subjects":[' + b",".join([b"[1]"] * 20_000) + b'],"x":}'
    try:
        decode_into(body, STREAM_TYPE, "StreamConfigRequest")
    except JsApiError as exc:
        assert exc.description.endswith("looking for beginning of value at offset %d" % len(body))
    else:
        raise AssertionError("no error")
    assert passes == 2  # the probe up to the last comma, the broken value; not the whole body again


def test_a_first_value_the_c_scanner_read_whole_is_not_checked_again(monkeypatch) -> None:
    from appliance.jetstream.api_streams import STREAM_TYPE
    from appliance.jetstream.decode import decode_into
    from appliance.jetstream.errors import JsApiError

    passes = 0
    c_scan = jsonscan._c_scan

    def counting(*args):
        nonlocal passes
        passes += 1
        return c_scan(*args)

    monkeypatch.setattr(jsonscan, "_c_scan", counting)
    first = b'{"name":"X","subjects":[' + b",".join([b'"s"'] * 20_000) + b"]}"
    try:
        decode_into(first + b" x", STREAM_TYPE, "StreamConfigRequest")
    except JsApiError as exc:
        offset = len(first) + 2
        expected = f"invalid character 'x' looking for beginning of value at offset {offset}"
        assert exc.description == f"invalid JSON: {expected}"
    else:
        raise AssertionError("no error")
    assert passes == 1  # only the second value ("x")
