"""Client-side helpers for tests that talk to a real server with nats-py."""

from __future__ import annotations

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg


async def flush_after_subs(nc: NATS) -> None:
    """SUB, then PING, on the wire, so the PONG promises the subscriptions made before this call.

    nats-py 2.16's flush() writes its PING to the socket at once and the SUBs still pending in its
    buffer a moment later (its flusher task), so a server may answer that PING before it has read the
    SUB, and a message another client publishes right after the PONG finds no subscriber. The real
    nats-server 2.15.1 loses such messages too: 6-8% of subscribe/flush/publish rounds on a loaded
    2-core machine (0 with this helper). The second flush's PING is written after the SUBs."""
    await nc.flush()
    await nc.flush()


async def connect_on(url: str, worker: int, workers: int, **options: object) -> NATS:
    """A connection that landed on `worker` of an appliance with `workers` workers (client ids are
    k+1, k+1+n, ... on worker k of n)."""
    for _ in range(200):
        nc = await nats.connect(url, **options)  # type: ignore[arg-type]
        assert nc._client_id is not None
        if (int(nc._client_id) - 1) % workers == worker:
            return nc
        await nc.close()
    raise AssertionError(f"no connection landed on worker {worker}")


async def request_replies(nc: NATS, subject: str, payload: bytes = b"") -> list[bytes]:
    """Publish a request to subject, its reply inbox subscribed first (flush_after_subs): the list
    its answers' payloads are appended to as they arrive (a service may answer more than once)."""
    inbox = nc.new_inbox()
    got: list[bytes] = []

    async def on_reply(msg: Msg) -> None:
        got.append(msg.data)

    await nc.subscribe(inbox, cb=on_reply)
    await flush_after_subs(nc)
    await nc.publish(subject, payload, reply=inbox)
    await nc.flush()
    return got
