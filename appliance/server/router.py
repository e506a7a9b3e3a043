"""Forwarding one message to the subscribers its subject matches, in one account.

Every subscriber — a client connection, an internal client, later a link to a sibling worker or
another host — has `deliver(sub, subject, reply, header, data)`. Plain subscribers each get the
message; each queue group gets it once, on a member picked at random.
"""

from __future__ import annotations

import random

from appliance.server.accounts import Account
from appliance.server.sublist import Subscription


def pick(members: tuple[Subscription, ...], origin: object, echo: bool, rng: random.Random) -> Subscription | None:
    count = len(members)
    sub = members[rng.randrange(count)] if count > 1 else members[0]
    if sub.conn is not origin or echo:
        return sub
    others = [m for m in members if m.conn is not origin]
    return others[rng.randrange(len(others))] if others else None


def route(account: Account, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes, *,
          origin: object, echo: bool, rng: random.Random) -> int:
    """Deliver to every match; returns how many subscriptions got the message."""
    sublist = account.sublist
    result = sublist.cache.get(subject)
    if result is None:
        result = sublist.match(subject)
    plain, queues = result
    delivered = 0
    for sub in plain:
        conn = sub.conn
        if conn is origin and not echo:
            continue
        conn.deliver(sub, subject, reply, header, data)
        delivered += 1
    for members in queues:
        chosen = pick(members, origin, echo, rng)
        if chosen is not None:
            chosen.conn.deliver(chosen, subject, reply, header, data)
            delivered += 1
    return delivered
