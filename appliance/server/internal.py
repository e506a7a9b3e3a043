"""Internal clients: server-side subscribers and publishers with no socket (JetStream API,
system services). They take part in routing exactly like client connections.

A handler runs synchronously inside the routing of the message that matched; it must not block.
It may publish (replies are routed at once). Messages published outside a client read are
flushed to sockets on the next loop turn.

What a handler raises stays here: that one message is dropped (a request gets no reply, as an
unanswerable one at nats-server), the failure is logged once per kind (`HANDLER_ERRORS`), and the
routing that called us — a client's read, a sibling worker's link — goes on with the next message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.log import ContainedErrors
from appliance.server.accounts import Account
from appliance.server.router import route
from appliance.server.sublist import Subscription

if TYPE_CHECKING:
    from appliance.server.server import Server

# handler(subject, reply, header, data): header is the raw header block or None; when it is a block,
# data is that block followed by the payload (as HMSG carries it)
Handler = Callable[[bytes, "bytes | None", "bytes | None", bytes], None]
# run_handler(payload, start, end, count): a run of `count` link records payload[start:end] with one
# subject from a sibling worker (appliance/server/links.py) in one call; True when it took the whole
# run, False (having done nothing) to get the records one by one through the handler
RunHandler = Callable[[bytes, int, int, int], bool]
HANDLER_ERRORS = ContainedErrors(logging.getLogger(__name__))


class InternalClient:
    is_link = False  # a subscriber here, not a sibling worker (see server/links.py)

    def __init__(self, server: Server, account: Account, name: str) -> None:
        self.server = server
        self.account = account
        self.name = name
        self.closed = False
        self._handlers: dict[Subscription, Handler] = {}
        self._run_handlers: dict[Subscription, RunHandler] = {}
        self._next_sid = 0
        self.cid = server.add_internal(self)

    def subscriptions(self) -> list[Subscription]:
        return list(self._handlers)

    def subscribe(self, subject: bytes, handler: Handler, *, queue: bytes | None = None,
                  run_handler: RunHandler | None = None) -> Subscription:
        assert not self.closed
        self._next_sid += 1
        sub = Subscription(self, subject, queue, str(self._next_sid).encode(), self.account.name)
        self._handlers[sub] = handler
        if run_handler is not None:
            self._run_handlers[sub] = run_handler
        self.account.sublist.insert(sub)
        self.server.on_interest_change(self.account, sub, added=True)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._run_handlers.pop(sub, None)
        if self._handlers.pop(sub, None) is not None:
            self.account.sublist.remove(sub)
            self.server.on_interest_change(self.account, sub, added=False)

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes | None, header: bytes | None,
                data: bytes) -> None:
        handler = self._handlers.get(sub)
        if handler is not None:
            sub.delivered += 1
            try:
                handler(subject, reply, header, data)
            except Exception as error:
                self._failed(sub, error)

    def deliver_run(self, sub: Subscription, payload: bytes, start: int, end: int, count: int) -> bool:
        """A run of link records for `sub` (as ClientConnection.deliver_run): to its run handler when it
        has one and takes it; False sends the caller to `deliver`, record by record."""
        run_handler = self._run_handlers.get(sub)
        if run_handler is None:
            return False
        try:
            if not run_handler(payload, start, end, count):
                return False
        except Exception as error:
            self._failed(sub, error)  # the run is dropped, as one message would be
        sub.delivered += count
        return True

    def _failed(self, sub: Subscription, error: Exception) -> None:
        HANDLER_ERRORS.contain(f"internal subscription {sub.subject.decode(errors='replace')!r} of {self.name}",
                               error)

    def publish(self, subject: bytes, data: bytes, *, reply: bytes | None = None, header: bytes | None = None,
                account: Account | None = None) -> int:
        """Route a message as this client; returns how many subscriptions got it."""
        if header is not None:
            data = header + data
        delivered = route(account or self.account, subject, reply, header, data, origin=self, echo=False,
                          rng=self.server.rng)
        self.server.schedule_flush()
        return delivered

    def publish_many(self, messages: list[tuple[bytes, bytes]], *, flush_now: bool = False) -> None:
        """Route (subject, payload) pairs as this client, in order, with no reply and no headers
        (a batch of replies: PubAcks released by one fsync). `flush_now` writes them to the
        sockets at once rather than on the next loop turn (a publisher waiting on an fsync)."""
        account = self.account
        rng = self.server.rng
        for subject, data in messages:
            route(account, subject, None, None, data, origin=self, echo=False, rng=rng)
        if flush_now:
            self.server.flush_dirty()
        else:
            self.server.schedule_flush()

    def close(self) -> None:
        for sub in list(self._handlers):
            self.unsubscribe(sub)
        self.closed = True
        self.server.remove_internal(self)
