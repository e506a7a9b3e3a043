"""wire.InfoLine: the INFO of each connection, with the server's fields encoded once, is byte for
byte the INFO json.dumps gives for the merged fields (the one nats-server clients parse)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.protocol import wire

_SCALARS = st.one_of(st.booleans(), st.integers(-2**40, 2**40), st.text(max_size=12), st.none())
_VALUES = st.one_of(_SCALARS, st.lists(st.text(max_size=8), max_size=3))
_SERVER_KEYS = st.text(alphabet="abcdefgh_", min_size=1, max_size=8)
_OWN_KEYS = st.text(alphabet="ijklmnop", min_size=1, max_size=8)  # never a server key, as in the server


def _merged(shared: dict[str, object], own: dict[str, object]) -> bytes:
    return b"INFO " + json.dumps({**shared, **own}, separators=(",", ":")).encode() + b" \r\n"


@settings(max_examples=300)
@given(st.lists(st.tuples(st.dictionaries(_SERVER_KEYS, _VALUES, max_size=6),
                          st.dictionaries(_OWN_KEYS, _VALUES, max_size=4)), min_size=1, max_size=6))
def test_each_line_is_the_merged_info(calls: list[tuple[dict[str, object], dict[str, object]]]) -> None:
    """Over a run of connections whose server fields sometimes change (or repeat), every line is
    what encoding the merged fields at once gives."""
    line = wire.InfoLine()
    for shared, own in calls:
        assert line.encode(shared, own) == _merged(shared, own)
        assert wire.info({**shared, **own}) == _merged(shared, own)


def test_a_changed_server_field_is_seen() -> None:
    """The server's fields come as a fresh dict each time: a changed value (connect_urls after a
    route came) must not reuse the previous encoding, nor must an equal dict re-encode differently."""
    line = wire.InfoLine()
    shared: dict[str, object] = {"server_id": "S", "connect_urls": ["a:1"]}
    assert line.encode(shared, {"client_id": 1}) == b'INFO {"server_id":"S","connect_urls":["a:1"],"client_id":1} \r\n'
    assert line.encode({"server_id": "S", "connect_urls": ["a:1", "b:2"]}, {"client_id": 2}) == \
        b'INFO {"server_id":"S","connect_urls":["a:1","b:2"],"client_id":2} \r\n'
    assert line.encode({"server_id": "S", "connect_urls": ["a:1", "b:2"]}, {"client_id": 3, "client_ip": "::1"}) == \
        b'INFO {"server_id":"S","connect_urls":["a:1","b:2"],"client_id":3,"client_ip":"::1"} \r\n'
