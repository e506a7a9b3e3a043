"""Monitoring over NATS: this server's answers to the system account's `$SYS.REQ.SERVER...` requests.

nats-server answers `$SYS.REQ.SERVER.PING` (statsz), `$SYS.REQ.SERVER.PING.<NAME>` and
`$SYS.REQ.SERVER.<id>.<NAME>` on every server; over routes each request reaches every server of the
cluster, so `server ls` lists them all. An internal client of the system account (on the worker that
serves monitoring) subscribes to the subjects of monitor/system.py; each request refreshes the
host-wide view (sibling workers' snapshots) and publishes the reply (None: filtered out, silent).
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


class SystemResponder:
    def __init__(self, server: Server, app: MonitorApp, refresh: Callable[[], Awaitable[None]]) -> None:
        self.server = server
        self.app = app
        self.refresh = refresh
        self.seq = 0
        self.client: InternalClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(SYSTEM_REQUESTS_IN_FLIGHT_MAX)

    def start(self) -> bool:
        name = self.server.accounts.system_name
        account = self.server.accounts.get(name) if name else None
        if account is None:
            return False
        self.client = InternalClient(self.server, account, "system requests")
        for subject, endpoint in system_subjects(self.server.server_id):
            self.client.subscribe(subject.encode(), self._handler(endpoint))
        return True

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
        for task in self._tasks:
            task.cancel()
        if self.client is not None:
            self.client.close()
