"""JetStream advisories on `$JS.EVENT.ADVISORY.>`, in nats-server 2.15.1's subjects and JSON.

Each advisory is published into the account it concerns, and only when someone listens on its
subject (nats-server checks interest the same way), so an account without advisory subscribers
pays one interest lookup per event and builds no JSON. Payloads start with `type`, `id` (a
22-character nuid-like id) and `timestamp`, then the fields nats-server sends for that type.
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING, Protocol

from appliance.jetstream import errors
from appliance.jetstream.wire import ZERO_TIME, go_json, rfc3339

if TYPE_CHECKING:
    import random

    from appliance.jetstream.consumer import Consumer
    from appliance.jetstream.service import AccountJetStream
    from appliance.server.client import ClientConnection
    from appliance.store.api import LostData

PREFIX = "$JS.EVENT.ADVISORY"
TYPE_PREFIX = "io.nats.jetstream.advisory.v1."
METRIC_TYPE = "io.nats.jetstream.metric.v1.consumer_ack"
GO_INT = re.compile(r"[+-]?[0-9]+")
ID_ALPHABET = string.digits + string.ascii_letters
ID_LENGTH = 22
STREAM_ACTIONS = {"create": "CREATED", "delete": "DELETED", "modify": "UPDATED"}
CONSUMER_ACTIONS = {"create": "CREATED", "delete": "DELETED"}


class Publisher(Protocol):
    rng: random.Random

    def now_ns(self) -> int: ...

    def has_interest(self, subject: str, queue: str = "") -> bool: ...

    def send(self, subject: str, payload: bytes, *, reply: str = "", header: bytes | None = None) -> None: ...


def new_id(rng: random.Random) -> str:
    return "".join(rng.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


def publish(
    host: Publisher, subject: str, kind: str, fields: dict[str, object], *, full_type: str = ""
) -> bool:
    """Send one advisory if anyone listens; True when it was sent."""
    if not host.has_interest(subject):
        return False
    body: dict[str, object] = {
        "type": full_type or TYPE_PREFIX + kind,
        "id": new_id(host.rng),
        "timestamp": rfc3339(host.now_ns()),
    }
    body.update(fields)
    host.send(subject, go_json(body))
    return True


# --- streams and consumers --------------------------------------------------------------------


def stream_action(ajs: AccountJetStream, stream: str, action: str) -> None:
    subject = f"{PREFIX}.STREAM.{STREAM_ACTIONS[action]}.{stream}"
    publish(ajs, subject, "stream_action", {"stream": stream, "action": action})


def stream_corrupt(host: Publisher, stream: str, lost: LostData) -> None:
    """`$JS.EVENT.ADVISORY.STREAM.CORRUPT.<stream>` (appliance's own; nats-server has none): the
    store holds damaged data it will not serve until repaired."""
    fields: dict[str, object] = {"stream": stream, "lost": lost_json(lost), "regions": list(lost.regions)}
    publish(host, f"{PREFIX}.STREAM.CORRUPT.{stream}", "stream_corrupt", fields)


def lost_json(lost: LostData) -> dict[str, object]:
    """nats-server's LostStreamData (`state.lost` of stream info)."""
    return {"msgs": list(lost.msgs), "bytes": lost.bytes}


def consumer_action(ajs: AccountJetStream, stream: str, consumer: str, action: str) -> None:
    subject = f"{PREFIX}.CONSUMER.{CONSUMER_ACTIONS[action]}.{stream}.{consumer}"
    publish(ajs, subject, "consumer_action", {"stream": stream, "consumer": consumer, "action": action})


def consumer_unpinned(ajs: AccountJetStream, stream: str, consumer: str, group: str, reason: str) -> None:
    """`$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.<stream>.<consumer>` (nats-server sends it on an
    UNPIN request whether or not a client was pinned)."""
    fields: dict[str, object] = {"account": ajs.account.name, "stream": stream, "consumer": consumer}
    if ajs.domain:
        fields["domain"] = ajs.domain
    fields.update({"group": group, "reason": reason})
    publish(ajs, f"{PREFIX}.CONSUMER.UNPINNED.{stream}.{consumer}", "consumer_group_unpinned", fields)


# --- the API audit ----------------------------------------------------------------------------


def requester(ajs: AccountJetStream, reply: str) -> ClientConnection | None:
    """The client connection on this worker that asked, found by its reply subject: the
    connection holding the most specific subscription the reply matches (the requester's inbox
    beats a wildcard watcher). None when the reply goes to a sibling worker's client (its
    subscription here is a link), to an internal client, or nowhere."""
    from appliance.server.client import ClientConnection

    if not reply:
        return None
    plain, queues = ajs.account.sublist.match(reply.encode())
    best: tuple[int, int, int] | None = None
    found: ClientConnection | None = None
    for sub in [*plain, *(m for members in queues for m in members)]:
        conn = sub.conn
        if not isinstance(conn, ClientConnection):
            continue
        tokens = sub.subject.split(b".")
        rank = (-tokens.count(b">"), len(tokens) - tokens.count(b"*"), -conn.cid)
        if best is None or rank > best:
            best, found = rank, conn
    return found


def client_info(ajs: AccountJetStream, conn: ClientConnection | None) -> dict[str, object]:
    """nats-server's ClientInfo of an advisory (empty fields left out, in its order)."""
    info: dict[str, object] = {}
    if conn is not None:
        info["start"] = rfc3339(int(conn.start_wall_s * 1e9))
        info["host"] = conn.ip
        info["id"] = conn.cid
    info["acc"] = ajs.account.name
    if conn is not None:
        info.update({"user": conn.user, "name": conn.name, "lang": conn.lang, "ver": conn.version,
                     "rtt": int(conn.rtt_s * 1e9)})
    info["server"] = ajs.server_name
    info["cluster"] = ajs.server.options.cluster.name
    info.update({"kind": "Client", "client_type": "nats"})
    return {key: value for key, value in info.items() if value}


def api_audit(
    ajs: AccountJetStream, subject: str, request: bytes, response: bytes, *, reply: str = ""
) -> None:
    """`$JS.EVENT.ADVISORY.API` after an answered API request. `client` describes the requesting
    connection when it is on this worker (found by its reply subject, see `requester`); a client
    on a sibling worker is known by account and server only."""
    target = f"{PREFIX}.API"
    if not ajs.has_interest(target):
        return
    fields: dict[str, object] = {
        "server": ajs.server_name,
        "client": client_info(ajs, requester(ajs, reply)),
        "subject": subject,
    }
    if request:
        fields["request"] = request.decode(errors="replace")
    fields["response"] = response.decode(errors="replace")
    domain = ajs.service.options.jetstream.domain
    if domain:
        fields["domain"] = domain
    publish(ajs, target, "api_audit", fields)


# --- deliveries -------------------------------------------------------------------------------


def _consumer_subject(consumer: Consumer, event: str) -> str:
    return f"{PREFIX}.CONSUMER.{event}.{consumer.stream.config.name}.{consumer.name}"


def nak(consumer: Consumer, sseq: int, tokens: list[str], offset: int) -> None:
    """A -NAK of a pending message; tokens are its ack subject's, offset where dc stands."""
    if sseq not in consumer.state.pending:
        return
    fields = _delivery_fields(consumer, sseq, tokens, offset)
    publish(consumer.host, _consumer_subject(consumer, "MSG_NAKED"), "nak", fields)


def terminated(consumer: Consumer, sseq: int, tokens: list[str], offset: int, body: bytes) -> None:
    """A +TERM [reason] of a pending message."""
    if sseq not in consumer.state.pending:
        return
    fields = _delivery_fields(consumer, sseq, tokens, offset)
    reason = body[5:].strip().decode(errors="replace")
    if reason:
        fields["reason"] = reason
    publish(consumer.host, _consumer_subject(consumer, "MSG_TERMINATED"), "terminated", fields)


def max_deliveries(consumer: Consumer, sseq: int, deliveries: int) -> None:
    fields: dict[str, object] = {
        "stream": consumer.stream.config.name,
        "consumer": consumer.name,
        "stream_seq": sseq,
        "deliveries": deliveries,
    }
    publish(consumer.host, _consumer_subject(consumer, "MAX_DELIVERIES"), "max_deliver", fields)


def _delivery_fields(consumer: Consumer, sseq: int, tokens: list[str], offset: int) -> dict[str, object]:
    return {
        "stream": consumer.stream.config.name,
        "consumer": consumer.name,
        "consumer_seq": _token_int(tokens, offset + 2),
        "stream_seq": sseq,
        "deliveries": _token_int(tokens, offset),
    }


def _token_int(tokens: list[str], index: int) -> int:
    try:
        return int(tokens[index])
    except (ValueError, IndexError):
        return 0


def consumer_pause(consumer: Consumer, paused: bool, pause_until_ns: int) -> None:
    fields: dict[str, object] = {
        "stream": consumer.stream.config.name,
        "consumer": consumer.name,
        "paused": paused,
        "pause_until": rfc3339(pause_until_ns) if pause_until_ns else ZERO_TIME,
    }
    publish(consumer.host, _consumer_subject(consumer, "PAUSE"), "consumer_pause", fields)


# --- ack sampling (sample_freq) -----------------------------------------------------------------


def sample_percent(sample_freq: str) -> int:
    """sample_freq as nats-server reads it: "N" or "N%"; a bad value is 10095 with Go's text."""
    text = sample_freq[:-1] if sample_freq.endswith("%") else sample_freq
    if not GO_INT.fullmatch(text):
        raise errors.CONSUMER_INVALID_SAMPLING.format(err=f'strconv.Atoi: parsing "{text}": invalid syntax')
    percent = int(text)
    if percent < 0:
        raise errors.CONSUMER_INVALID_SAMPLING.format(err="<nil>")
    return percent


def ack_metric(consumer: Consumer, sseq: int, acked_cseq: int = 0) -> None:
    """`$JS.EVENT.METRIC.CONSUMER.ACK.<stream>.<consumer>` for a sampled ack of a pending message
    (consumer_seq: the acked delivery's, from its ack subject, else the first delivery's)."""
    pending = consumer.state.pending.get(sseq)
    if pending is None:
        return
    percent = sample_percent(consumer.config.sample_freq)
    if percent <= 0 or (percent < 100 and consumer.host.rng.randrange(100) >= percent):
        return
    cseq, delivered_ns = pending
    cseq = acked_cseq or cseq
    stream = consumer.stream.config.name
    fields: dict[str, object] = {
        "stream": stream,
        "consumer": consumer.name,
        "consumer_seq": cseq,
        "stream_seq": sseq,
        "ack_time": max(consumer.host.now_ns() - delivered_ns, 0),
        "deliveries": consumer.state.redelivered.get(sseq, 1),
    }
    subject = f"$JS.EVENT.METRIC.CONSUMER.ACK.{stream}.{consumer.name}"
    publish(consumer.host, subject, "", fields, full_type=METRIC_TYPE)
