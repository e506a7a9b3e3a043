"""Monitoring over NATS: this server's answers to the system account's `$SYS.REQ.SERVER...` requests.

nats-server answers `$SYS.REQ.SERVER.PING` (statsz), `$SYS.REQ.SERVER.PING.<NAME>` and
`$SYS.REQ.SERVER.<id>.<NAME>` on every server; over routes each request reaches every server of the
cluster, so `server ls` lists them all. An internal client of the system account (on the worker that
serves monitoring) subscribes to the subjects of monitor/system.py; each request refreshes the
host-wide view (sibling workers' snapshots) and publishes the reply (None: filtered out, silent).

Like nats-server it also publishes its statsz unasked on `$SYS.SERVER.<id>.STATSZ`: first after
STATSZ_FIRST_S, then at doubling intervals up to STATSZ_INTERVAL_S. A Go server counts the servers it
hears these from in its own statsz `active_servers` (and forgets one that falls silent), so over
the routes the Go nodes of a mixed cluster count the appliance nodes too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from appliance.server.internal import InternalClient
from appliance.server.monitor.app import MonitorApp
from appliance.server.monitor.system import system_subjects
from appliance.server.server import Server

logger = logging.getLogger(__name__)

SYSTEM_REQUESTS_IN_FLIGHT_MAX = 64  # requests answered at once; more wait for the next (never dropped silently)
STATSZ_FIRST_S = 0.25  # nats-server's first statsz event after start, then doubling...
STATSZ_INTERVAL_S = 10.0  # ...up to its statsz heartbeat interval


class SystemResponder:
    def __init__(self, server: Server, app: MonitorApp, refresh: Callable[[], Awaitable[None]]) -> None:
        self.server = server
        self.app = app
        self.refresh = refresh
        self.seq = 0
        self.client: InternalClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(SYSTEM_REQUESTS_IN_FLIGHT_MAX)
        self._statsz: asyncio.Task[None] | None = None

    def start(self) -> bool:
        name = self.server.accounts.system_name
        account = self.server.accounts.get(name) if name else None
        if account is None:
            return False
        self.client = InternalClient(self.server, account, "system requests")
        for subject, endpoint in system_subjects(self.server.server_id):
            self.client.subscribe(subject.encode(), self._handler(endpoint))
        self._statsz = self.server.loop.create_task(self._statsz_events())
        return True

    async def _statsz_events(self) -> None:
        subject = f"$SYS.SERVER.{self.server.server_id}.STATSZ".encode()
        interval = STATSZ_FIRST_S
        while self.client is not None and not self.client.closed:
            await asyncio.sleep(interval)
            interval = min(interval * 2, STATSZ_INTERVAL_S)
            async with self._slots:
                try:
                    await self.refresh()
                    self.seq += 1
                    event = self.app.system_reply("STATSZ", b"", seq=self.seq)
                except Exception:  # a failed round is logged; the next one comes anyway
                    logger.exception("statsz event failed")
                    continue
            if event is not None and self.client is not None and not self.client.closed:
                self.client.publish(subject, event)

    def _handler(self, endpoint: str) -> Callable[[bytes, bytes | None, bytes | None, bytes], None]:
        def on_request(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
            if reply is None:
                return
            body = data[len(header):] if header is not None else data
            task = self.server.loop.create_task(self._answer(endpoint, reply, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return on_request

    async def _answer(self, endpoint: str, reply: bytes, body: bytes) -> None:
        async with self._slots:
            try:
                await self.refresh()
                self.seq += 1
                answer = self.app.system_reply(endpoint, body, seq=self.seq)
            except Exception:  # one bad request must not stop the service
                logger.exception("system request %s failed", endpoint)
                return
            if answer is not None and self.client is not None and not self.client.closed:
                self.client.publish(reply, answer)

    def close(self) -> None:
        if self._statsz is not None:
            self._statsz.cancel()
        for task in self._tasks:
            task.cancel()
        if self.client is not None:
            self.client.close()
