"""Request validation of `$JS.API.STREAM.MSG.GET` and `$JS.API.DIRECT.GET` (both forms), field by
field, against nats-server 2.15.1: the same request bodies to both servers, the answers compared
(MSG.GET: error code, err_code, description or the message's subject, seq, headers, data;
DIRECT.GET: every reply's status, description, Nats-Sequence and payload until the last one)."""

from __future__ import annotations

import json

import pytest

from appliance.testing.rawclient import RawClient

pytestmark = pytest.mark.integration

T_PAST = "2000-01-01T00:00:00Z"
T_FUTURE = "2100-01-01T00:00:00Z"

BODIES = [
    b"",
    b"   ",
    b"{}",
    b"null",
    b"[]",
    b'"x"',
    b"{bad",
    b'{"seq":0}',
    b'{"seq":1}',
    b'{"seq":3}',
    b'{"seq":99}',
    b'{"seq":-1}',
    b'{"seq":"1"}',
    b'{"seq":1.5}',
    b'{"seq":1,"last_by_subj":"g.a"}',
    b'{"seq":1,"next_by_subj":"g.b"}',
    b'{"seq":0,"next_by_subj":"g.b"}',
    b'{"next_by_subj":"g.*"}',
    b'{"next_by_subj":"g.none"}',
    b'{"last_by_subj":"g.a"}',
    b'{"last_by_subj":"g.none"}',
    b'{"last_by_subj":"g.a","next_by_subj":"g.a"}',
    b'{"last_by_subj":""}',
    b'{"seq":1,"batch":2}',
    b'{"seq":2,"batch":0}',
    b'{"seq":1,"batch":-1}',
    b'{"seq":1,"max_bytes":10}',
    b'{"seq":1,"batch":3,"max_bytes":1}',
    b'{"last_by_subj":"g.a","batch":2}',
    b'{"next_by_subj":"g.a","batch":5}',
    b'{"start_time":"' + T_PAST.encode() + b'"}',
    b'{"start_time":"' + T_FUTURE.encode() + b'"}',
    b'{"start_time":"' + T_PAST.encode() + b'","seq":2}',
    b'{"start_time":"' + T_PAST.encode() + b'","last_by_subj":"g.a"}',
    b'{"start_time":"' + T_PAST.encode() + b'","next_by_subj":"g.b"}',
    b'{"start_time":"yesterday"}',
    b'{"start_time":null,"seq":2}',
    b'{"multi_last":["g.*"]}',
    b'{"multi_last":["g.*"],"seq":1}',
    b'{"multi_last":["g.*"],"last_by_subj":"g.a"}',
    b'{"multi_last":["g.*"],"next_by_subj":"g.a"}',
    b'{"multi_last":["g.*"],"up_to_seq":2}',
    b'{"multi_last":["g.*"],"up_to_seq":2,"up_to_time":"' + T_PAST.encode() + b'"}',
    b'{"multi_last":["g.*"],"up_to_time":"' + T_PAST.encode() + b'"}',
    b'{"multi_last":[]}',
    b'{"seq":1,"no_hdr":true}',
    b'{"seq":2,"no_hdr":true}',
    b'{"seq":2,"no_hdr":false}',
    b'{"seq":2,"unknown":1}',
]

SETUP = [
    ("$JS.API.STREAM.CREATE.G", b'{"name":"G","subjects":["g.>"],"allow_direct":true}'),
]
MESSAGES = [("g.a", b"", b"one"), ("g.b", b"NATS/1.0\r\nK: v\r\n\r\n", b"two"), ("g.a", b"", b"")]


def request(client: RawClient, subject: str, body: bytes) -> tuple[list[bytes], bytes, bytes]:
    client.send(b"PUB %s _R %d\r\n%s\r\n" % (subject.encode(), len(body), body))
    return client.read_msg()


def msg_get_answer(payload: bytes) -> object:
    answer = json.loads(payload)
    if "error" in answer:
        error = answer["error"]
        # nats-server's JSON decoder error texts are Go's own: the code is compared, not the text
        text = "<json error>" if error.get("err_code") == 10025 else error.get("description")
        return ("error", error.get("code"), error.get("err_code"), text)
    message = answer["message"]
    return ("message", message["subject"], message["seq"], message.get("hdrs"), message.get("data"))


def direct_answers(client: RawClient, subject: str, body: bytes) -> list[object]:
    client.send(b"PUB %s _R %d\r\n%s\r\n" % (subject.encode(), len(body), body))
    seen: list[object] = []
    for _ in range(10):
        _, head, payload = client.read_msg()
        lines = head.split(b"\r\n")
        status = lines[0][len(b"NATS/1.0") :].strip()
        fields = dict(line.split(b": ", 1) for line in lines[1:] if b": " in line)
        seen.append((status, fields.get(b"Nats-Sequence"), fields.get(b"Nats-Num-Pending"),
                     fields.get(b"Nats-Last-Sequence"), fields.get(b"K"), payload))
        if status or b"Nats-Num-Pending" not in fields:
            break  # a status ends the answer; so does a single message
    return seen


def observe(port: int) -> list[object]:
    client = RawClient(port)
    seen: list[object] = []
    try:
        client.send(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nSUB _R 1\r\n')
        for subject, body in SETUP:
            assert b'"error"' not in request(client, subject, body)[2]
        for subject, header, payload in MESSAGES:
            if header:
                client.send(b"HPUB %s _R %d %d\r\n%s%s\r\n" % (subject.encode(), len(header), len(header) + len(payload), header, payload))
            else:
                client.send(b"PUB %s _R %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
            client.read_msg()
        for body in BODIES:
            seen.append(("MSG.GET", body, msg_get_answer(request(client, "$JS.API.STREAM.MSG.GET.G", body)[2])))
            seen.append(("MSG.GET missing stream", body, msg_get_answer(request(client, "$JS.API.STREAM.MSG.GET.NONE", body)[2])))
            seen.append(("DIRECT.GET", body, direct_answers(client, "$JS.API.DIRECT.GET.G", body)))
            seen.append(("DIRECT.GET.G.g.a", body, direct_answers(client, "$JS.API.DIRECT.GET.G.g.a", body)))
    finally:
        client.close()
    return seen


def test_msg_get_and_direct_get_validate_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = observe(int(real_url.rsplit(":", 1)[1]))
    got = observe(int(our_url.rsplit(":", 1)[1]))
    differences = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not differences, "\n".join(f"nats-server {e}\nappliance   {g}" for e, g in differences)
    assert len(got) == len(expected)


DELETE_BODIES = [b'{"seq":2}', b'{"seq":2}', b'{"seq":99}', b'{"seq":0}', b"", b"{}", b'{"seq":1,"no_erase":true}',
                 b'{"seq":1}', b'{"seq":5}', b'{"seq":-1}']


def observe_deletes(port: int) -> list[object]:
    """STREAM.MSG.DELETE on a file and a memory stream: nats-server's file store answers 10057
    ("no message found" below the first sequence, "stream store EOF" past the last) where its
    memory store answers 10043; an empty request is 10003."""
    client = RawClient(port)
    seen: list[object] = []
    try:
        client.send(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nSUB _R 1\r\n')
        for name, storage in (("F", "file"), ("M", "memory")):
            body = json.dumps({"name": name, "subjects": [name.lower()], "storage": storage}).encode()
            assert b'"error"' not in request(client, f"$JS.API.STREAM.CREATE.{name}", body)[2]
            for _ in range(4):
                request(client, name.lower(), b"x")
            for body in DELETE_BODIES:
                seen.append((storage, body, msg_get_answer_or_success(request(client, f"$JS.API.STREAM.MSG.DELETE.{name}", body)[2])))
        seen.append(("missing stream", msg_get_answer_or_success(request(client, "$JS.API.STREAM.MSG.DELETE.NONE", b"")[2])))
    finally:
        client.close()
    return seen


def msg_get_answer_or_success(payload: bytes) -> object:
    answer = json.loads(payload)
    return answer.get("success") if "error" not in answer else msg_get_answer(payload)


def test_msg_delete_answers_as_nats_server(servers: tuple[str, str]) -> None:
    real_url, our_url = servers
    expected = observe_deletes(int(real_url.rsplit(":", 1)[1]))
    got = observe_deletes(int(our_url.rsplit(":", 1)[1]))
    assert got == expected
