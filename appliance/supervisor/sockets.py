"""The listening sockets, opened once by the supervisor and inherited by every worker.

Port -1 means "any free port" (nats-server's RANDOM_PORT); the log line names the real one, as
nats-server's does, because scripts read the port from it. The kernel spreads new connections
over the workers that accept on the shared socket.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

from appliance import limits
from appliance.config.options import ServerOptions
from appliance.errors import StartupError

logger = logging.getLogger(__name__)

RANDOM_PORT = -1


@dataclass(slots=True)
class Listeners:
    client: socket.socket
    http: socket.socket | None
    cluster: socket.socket | None = None  # route connections; served by worker 0
    websocket: socket.socket | None = None  # WebSocket clients; served by every worker

    @property
    def client_port(self) -> int:
        return int(self.client.getsockname()[1])

    @property
    def http_port(self) -> int | None:
        return None if self.http is None else int(self.http.getsockname()[1])

    def close(self) -> None:
        self.client.close()
        if self.http is not None:
            self.http.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.websocket is not None:
            self.websocket.close()


def join_host_port(host: str, port: int) -> str:
    """Go's net.JoinHostPort: IPv6 literals in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def open_listener(host: str, port: int, *, backlog: int = limits.ACCEPT_BACKLOG) -> socket.socket:
    """A bound, listening TCP socket (SO_REUSEADDR); port -1 or 0 picks a free one."""
    bind_port = 0 if port == RANDOM_PORT else port
    assert 0 <= bind_port <= 65535
    try:
        infos = socket.getaddrinfo(host or None, bind_port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family = infos[0][0]
        address = infos[0][4]
        listener = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise StartupError(_listen_error(host, bind_port, exc)) from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(backlog)
    except OSError as exc:
        listener.close()
        raise StartupError(_listen_error(host, bind_port, exc)) from exc
    return listener


def open_listeners(options: ServerOptions) -> Listeners:
    """Monitoring first, then clients: the order (and wording) of nats-server's start-up log."""
    http = None
    if options.http_port != 0 or options.https_port != 0:
        scheme = "http" if options.http_port != 0 else "https"  # validate_options allows one of the two
        http = open_listener(options.http_host, options.http_port or options.https_port)
        logger.info("Starting %s monitor on %s", scheme, join_host_port(options.http_host, int(http.getsockname()[1])))
    websocket = None
    try:
        websocket = _open_websocket(options)
        client = open_listener(options.host, options.port)
    except StartupError:
        if http is not None:
            http.close()
        if websocket is not None:
            websocket.close()
        raise
    logger.info("Listening for client connections on %s", join_host_port(options.host, int(client.getsockname()[1])))
    cluster = None
    if options.cluster.port != 0:
        try:
            cluster = open_listener(options.cluster.host, options.cluster.port)
        except StartupError:
            client.close()
            if http is not None:
                http.close()
            if websocket is not None:
                websocket.close()
            raise
        logger.info("Cluster name is %s", options.cluster.name or "(none)")
        logger.info("Listening for route connections on %s",
                    join_host_port(options.cluster.host, int(cluster.getsockname()[1])))
        if options.cluster.tls is not None and options.cluster.tls.insecure:
            logger.warning("TLS certificate chain and hostname of solicited routes will not be verified. "
                           "DO NOT USE IN PRODUCTION!")
    if options.tls is not None:
        first_only = options.tls.handshake_first and options.tls.handshake_first_fallback_s == 0
        if options.allow_non_tls and not first_only:
            logger.info("TLS available for client connections")
        else:
            logger.info("TLS required for client connections")
        if first_only:
            logger.warning('Clients that are not using "TLS Handshake First" option will fail to connect')
    return Listeners(client=client, http=http, cluster=cluster, websocket=websocket)


def _open_websocket(options: ServerOptions) -> socket.socket | None:
    """nats-server's startWebsocketServer log lines: the scheme says whether it is TLS."""
    ws = options.websocket
    if ws.port == 0:
        return None
    listener = open_listener(ws.host, ws.port)
    scheme = "ws" if ws.tls is None else "wss"
    logger.info("Listening for websocket clients on %s://%s", scheme, join_host_port(ws.host, int(listener.getsockname()[1])))
    if ws.tls is None:
        logger.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")
    return listener


def _listen_error(host: str, port: int, exc: OSError) -> str:
    where = join_host_port(host, port)
    reason = exc.strerror or str(exc)
    return f'Error listening on port: {where}, "listen tcp {where}: bind: {reason.lower()}"'
