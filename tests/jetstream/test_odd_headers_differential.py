"""Headers are opaque bytes to a stream: a message published with odd header lines (spaces around
or inside a key, whitespace-only values, an empty key, a line without a colon) is stored and
delivered byte for byte as nats-server 2.15.1 does (pull fetch, MSG.GET, DIRECT.GET), and a
consumer never stalls on it. The same raw HPUB bytes go to both servers; answers are compared
with times masked."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.jetstream.wire import append_headers, strip_status
from appliance.testing.rawclient import RawClient

pytestmark = pytest.mark.integration

HEADERS = [
    b"NATS/1.0\r\n a b : c\r\n\r\n",
    b"NATS/1.0\r\nk:  \r\n\r\n",
    b"NATS/1.0\r\n: v\r\n\r\n",
    b"NATS/1.0\r\nk v: 1\r\n\r\n",
    b"NATS/1.0\r\nk :1\r\n\r\n",
    b"NATS/1.0\r\nnocolon\r\n\r\n",
    b"NATS/1.0\r\n\r\n",
    b"NATS/1.0 \r\nA:1\r\n\r\n",
    b"NATS/1.0\r\n\tTab:\t x \r\nA:1\r\nA:2\r\n\r\n",
    b"NATS/1.0  \r\n\r\n",
    b"NATS/1.0 503 No Responders\r\nA:1\r\n\r\n",
    b"NATS/1.0\tx\r\nA:1\r\n\r\n",
    b"NATS/1.0\r\nA:1\r\n",
    b"NATS/1.0",
    b"HTTP/1.1\r\nA:1\r\n\r\n",
]

TIMESTAMP = re.compile(rb"Nats-Time-Stamp: [^\r]*")


def request(client: RawClient, subject: str, body: bytes) -> tuple[list[bytes], bytes, bytes]:
    client.send(b"PUB %s _R %d\r\n%s\r\n" % (subject.encode(), len(body), body))
    return client.read_msg()


def observe(port: int) -> list[object]:
    client = RawClient(port)
    seen: list[object] = []
    try:
        client.send(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nSUB _R 1\r\n')
        created = request(client, "$JS.API.STREAM.CREATE.H", b'{"name":"H","subjects":["h.>"],"allow_direct":true}')
        assert b'"error"' not in created[2], created
        for name, extra in (("C", b""), ("O", b',"headers_only":true')):
            consumer = b'{"stream_name":"H","config":{"durable_name":"%s","ack_policy":"none"%s}}' % (name.encode(), extra)
            assert b'"error"' not in request(client, f"$JS.API.CONSUMER.CREATE.H.{name}", consumer)[2]
        for index, header in enumerate(HEADERS):
            seq = index + 1
            payload = b"p%d" % index
            client.send(b"HPUB h.%d _R %d %d\r\n%s%s\r\n" % (index, len(header), len(header) + len(payload), header, payload))
            seen.append(client.read_msg()[2])  # the PubAck
            for name in ("C", "O"):  # whole messages, headers only
                tokens, head, body = request(client, f"$JS.API.CONSUMER.MSG.NEXT.H.{name}", b'{"batch":1,"expires":5000000000}')
                ack = tokens[3].split(b".")
                ack[7] = b"<ts>"
                seen.append(("fetch", tokens[1], b".".join(ack), head, body))
            _, _, answer = request(client, "$JS.API.STREAM.MSG.GET.H", b'{"seq":%d}' % seq)
            message = json.loads(answer)["message"]
            seen.append(("msg.get", base64.b64decode(message.get("hdrs", "")), message.get("data"), message["subject"]))
            tokens, head, body = request(client, "$JS.API.DIRECT.GET.H", b'{"seq":%d}' % seq)
            seen.append(("direct.get", tokens[1], TIMESTAMP.sub(b"<ts>", head), body))
    finally:
        client.close()
    return seen


def test_odd_header_lines_are_stored_and_delivered_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = observe(int(real_url.rsplit(":", 1)[1]))
    got = observe(int(our_url.rsplit(":", 1)[1]))
    assert got == expected


@given(st.binary(max_size=40), st.sampled_from([b"", b"NATS/1.0", b"NATS/1.0 ", b"NATS/1.0\r\n"]))
def test_strip_status_keeps_everything_from_the_first_cr(tail: bytes, head: bytes) -> None:
    block = head + tail
    stripped = strip_status(block)
    assert strip_status(stripped) == stripped
    end = block.find(b"\r")
    if block.startswith(b"NATS/1.0") and end > 8:
        assert stripped in (b"NATS/1.0" + block[end:], b"")
        assert stripped or block[end:] == b"\r\n\r\n"
    else:
        assert stripped == block


def test_headers_only_and_direct_get_take_any_closing_bytes() -> None:
    assert append_headers(b"NATS/1.0", [("A", "1")]) == b"NATS/1A: 1\r\n\r\n"  # as nats-server
    assert append_headers(b"", [("A", "1")]) == b"NATS/1.0\r\nA: 1\r\n\r\n"
