"""The cluster's client URLs on every worker of a host, and the async INFO that tells clients.

Theory of operation: the worker holding the routes (server/routes.py) knows the other servers'
client URLs from their route INFO. It publishes the list on CLUSTER_URLS_SUBJECT, an internal subject
of the system account (the global one without it) that never leaves the host (routes.py keeps it off
the routes); every other worker subscribes to it through an internal client, so its subscription
reaches the route holder over the ring like any interest, and the holder publishes the list again
whenever a subscription of that subject appears (a worker that started or restarted). Each worker
keeps the list in `Server.cluster_urls`; client INFO carries it as `connect_urls`, and a change is
sent to the connected clients as an async INFO, as nats-server does, so clients fail over.
"""

from __future__ import annotations

import json

from appliance.server.accounts import Account
from appliance.server.internal import InternalClient
from appliance.server.server import Server

CLUSTER_URLS_SUBJECT = b"$SYS._APPLIANCE_.CLUSTER.URLS"


def urls_account(server: Server) -> Account:
    name = server.accounts.system_name
    account = server.accounts.get(name) if name else None
    return account if account is not None else server.global_account()


def follow_cluster_urls(server: Server) -> InternalClient:
    """On a worker that does not hold the routes: keep server.cluster_urls from the holder's messages."""
    client = InternalClient(server, urls_account(server), "cluster urls")

    def on_urls(subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        urls = json.loads(data)
        if isinstance(urls, list) and all(isinstance(url, str) for url in urls):
            server.set_cluster_urls(urls)

    client.subscribe(CLUSTER_URLS_SUBJECT, on_urls)
    return client


def publish_cluster_urls(client: InternalClient, urls: list[str]) -> None:
    client.publish(CLUSTER_URLS_SUBJECT, json.dumps(urls).encode())
