"""The `websocket {}` block of a NATS config (nats-server's `parseWebsocket`, server/opts.go).

WebSocket clients speak the client protocol inside WebSocket frames on their own port. As
nats-server: TLS is required unless `no_tls`; a `tls {}` here is the WebSocket port's own
(`wss://`). Keys nats-server knows and appliance does not implement are reported, never ignored.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from appliance.config.convert import (
    BadValue,
    Problems,
    as_bool,
    as_listen,
    as_map,
    as_port,
    as_str,
    as_str_list,
    parse_go_duration,
)
from appliance.config.parser import Entry, Value
from appliance.config.tls import TLSOptions, parse_tls

_UNSUPPORTED = frozenset({"headers", "tls_pinned_certs", "ocsp_peer"})
_COOKIE_KEYS = {"jwt_cookie": "jwt_cookie", "user_cookie": "user_cookie", "pass_cookie": "pass_cookie",
                "token_cookie": "token_cookie"}
_ORIGIN_KEYS = frozenset({"allowed_origins", "allowed_origin", "allow_origins", "allow_origin", "origins", "origin"})


@dataclass(slots=True)
class WebsocketOptions:
    host: str = "0.0.0.0"
    port: int = 0  # 0: no WebSocket listener; -1: random
    advertise: str = ""
    no_tls: bool = False
    tls: TLSOptions | None = None
    same_origin: bool = False
    allowed_origins: list[str] = field(default_factory=list)
    compression: bool = False
    handshake_timeout_s: float = 0.0  # 0: the TLS timeout with TLS, else limits.WS_HANDSHAKE_TIMEOUT_S
    jwt_cookie: str = ""
    user_cookie: str = ""  # the upgrade request's cookies that stand in for CONNECT's user, pass, auth_token
    pass_cookie: str = ""
    token_cookie: str = ""
    no_auth_user: str = ""
    # `authorization {}`: when username, token or no_auth_user is set, these replace the server's
    # single user, token and no_auth_user for WebSocket clients (nats-server's authOverride)
    username: str = ""
    password: str = ""
    token: str = ""
    auth_timeout_s: float = 0.0  # 0: the server's authorization timeout

    @property
    def auth_override(self) -> bool:
        return bool(self.username or self.token or self.no_auth_user)

    @property
    def enabled(self) -> bool:
        return self.port != 0


def parse_websocket(entry: Entry, problems: Problems) -> WebsocketOptions:
    ws = WebsocketOptions()
    for item in as_map(entry.key, entry.value).values():
        try:
            _key(ws, item, problems)
        except BadValue as error:
            problems.bad(error)
    return ws


def _key(ws: WebsocketOptions, item: Entry, problems: Problems) -> None:
    key, value = item.key.lower(), item.value
    if key == "listen":
        host, ws.port = as_listen(key, value)
        ws.host = host if host is not None else ws.host
    elif key == "port":
        ws.port = as_port(key, value)
    elif key in ("host", "net"):
        ws.host = as_str(key, value)
    elif key == "advertise":
        ws.advertise = as_str(key, value)
    elif key == "no_tls":
        ws.no_tls = as_bool(key, value)
    elif key == "tls":
        ws.tls = parse_tls(item)
        if ws.tls.pinned_certs:  # the client port and routes check them; the WebSocket port does not yet
            raise BadValue(item.key_position, 'field "pinned_certs" is known to nats-server but not supported by '
                                              "appliance in a websocket tls block")
    elif key == "same_origin":
        ws.same_origin = as_bool(key, value)
    elif key in _ORIGIN_KEYS:
        ws.allowed_origins = _origins(key, value)
    elif key in ("compression", "compress"):
        ws.compression = as_bool(key, value)
    elif key == "handshake_timeout":
        ws.handshake_timeout_s = _handshake_timeout(value)
    elif key in _COOKIE_KEYS:
        setattr(ws, _COOKIE_KEYS[key], as_str(key, value))
    elif key in ("authorization", "authentication"):
        _simple_auth(ws, item, problems)
    elif key == "no_auth_user":
        ws.no_auth_user = as_str(key, value)
    elif key in _UNSUPPORTED:
        problems.unsupported(item)
    else:
        problems.unknown(item)


def _simple_auth(ws: WebsocketOptions, entry: Entry, problems: Problems) -> None:
    """nats-server's parseSimpleAuth: user, password, token and timeout, nothing else (no users list)."""
    for item in as_map(entry.key, entry.value).values():
        key, value = item.key.lower(), item.value
        try:
            if key in ("user", "username"):
                ws.username = as_str(key, value)
            elif key in ("pass", "password"):
                ws.password = as_str(key, value)
            elif key == "token":
                ws.token = as_str(key, value)
            elif key == "timeout":  # seconds; a value of another type is 1 s, as nats-server reads it
                data = value.data
                ws.auth_timeout_s = float(data) if isinstance(data, int | float) and not isinstance(data, bool) \
                    else 1.0
            else:
                problems.unknown(item)
        except BadValue as error:
            problems.bad(error)


def _origins(key: str, value: Value) -> list[str]:
    origins = as_str_list(key, value)
    for origin in origins:
        try:
            urllib.parse.urlsplit(origin).port  # noqa: B018  # raises on a bad port
        except ValueError as error:
            raise BadValue(value.position, f"unable to parse allowed origin: {error}") from None
    return list(origins)


def _handshake_timeout(value: Value) -> float:
    """An integer is seconds, a string a Go duration (nats-server's handshake_timeout)."""
    data = value.data
    if isinstance(data, bool):
        raise BadValue(value.position, f"error parsing handshake timeout: unexpected type {type(data).__name__}")
    if isinstance(data, int | float):
        return float(data)
    if isinstance(data, str):
        try:
            return parse_go_duration(data)
        except ValueError as error:
            raise BadValue(value.position, f"error parsing handshake timeout: {error}") from None
    raise BadValue(value.position, f"error parsing handshake timeout: unexpected type {type(data).__name__}")


def websocket_problems(options_ws: WebsocketOptions, *, trusted: bool, has_users: bool,
                       no_auth_user_problems: list[str]) -> list[str]:
    """nats-server's validateWebsocketOptions, its first error (`has_users`: users or NKey users,
    of `authorization` or of any account; `no_auth_user_problems`: validateNoAuthUser's for the
    block's no_auth_user)."""
    if options_ws.port == 0:
        return []
    if options_ws.tls is None and not options_ws.no_tls:
        return ["websocket requires TLS configuration"]
    if options_ws.no_auth_user and no_auth_user_problems:
        return no_auth_user_problems[:1]
    if has_users and options_ws.username:
        return ["websocket authentication username not compatible with presence of users/nkeys"]
    if has_users and options_ws.token:
        return ["websocket authentication token not compatible with presence of users/nkeys"]
    if options_ws.jwt_cookie and not trusted:
        return ["trusted operators or trusted keys configuration is required for JWT authentication "
                f'via cookie "{options_ws.jwt_cookie}"']
    return []
