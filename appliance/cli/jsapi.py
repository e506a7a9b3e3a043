"""The client side shared by the admin verbs: connection flags, JetStream API requests, exits.

Every verb speaks the standard wire API through nats-py (`$JS.API.*`, `$SYS.REQ.*`), so the same
command works against appliance and against the real nats-server. An API answer carrying
`error` becomes `ApiError`; a command that fails prints one `nats: error: ...` line to stderr and
exits 1, as the `nats` CLI does.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, NoReturn, ParamSpec, TypeVar

import click
import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError

from appliance import limits
from appliance.errors import ApplianceError

JsonDict = dict[str, Any]
P = ParamSpec("P")
T = TypeVar("T")
DEFAULT_URL = "nats://127.0.0.1:4222"
ERROR_PREFIX = "nats: error: "
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
NatsTimeout = nats.errors.TimeoutError


class ApiError(ApplianceError):
    """The JetStream API answered with an error object; text as nats tools print it."""

    def __init__(self, *, code: int, err_code: int, description: str) -> None:
        super().__init__(f"{description} ({err_code})")
        self.code = code
        self.err_code = err_code
        self.description = description


class CommandError(ApplianceError):
    """A verb cannot go on (bad flags, nothing received, ...): printed as `nats: error: <text>`."""


@dataclass(frozen=True, slots=True)
class Connection:
    """Where and as whom to connect; from the common flags."""

    url: str
    user: str | None
    password: str | None
    timeout_s: float


def connection_options(command: Callable[P, T]) -> Callable[P, T]:
    """`-s/--server` (env NATS_URL), `--user`, `--password`, `--timeout`, gathered as `conn`."""
    decorators = [
        click.option(
            "--timeout",
            "timeout_s",
            type=float,
            default=limits.CLI_REQUEST_TIMEOUT_S,
            show_default=True,
            help="Seconds to wait for each answer.",
        ),
        click.option("--password", envvar="NATS_PASSWORD", help="Password (env NATS_PASSWORD)."),
        click.option("--user", envvar="NATS_USER", help="User name (env NATS_USER)."),
        click.option(
            "-s",
            "--server",
            "url",
            envvar="NATS_URL",
            default=DEFAULT_URL,
            show_default=True,
            help="NATS server URL(s), comma separated (env NATS_URL).",
        ),
    ]
    wrapped: Callable[..., Any] = _gather_connection(command)
    for decorator in decorators:
        wrapped = decorator(wrapped)
    return wrapped


def _gather_connection(command: Callable[P, T]) -> Callable[..., T]:
    @wraps(command)
    def gather(
        *args: Any, url: str, user: str | None, password: str | None, timeout_s: float, **kwargs: Any
    ) -> T:
        conn = Connection(url=url, user=user, password=password, timeout_s=timeout_s)
        return command(*args, conn=conn, **kwargs)  # type: ignore[arg-type]

    return gather


async def connect(conn: Connection) -> Client:
    """One connection attempt round (each URL at most twice, no waiting between rounds)."""
    errors: list[Exception] = []

    async def remember(exc: Exception) -> None:
        errors.append(exc)

    options: JsonDict = {
        "servers": [url.strip() for url in conn.url.split(",")],
        "connect_timeout": conn.timeout_s,
        "allow_reconnect": False,
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0,
        "error_cb": remember,
    }
    if conn.user is not None:
        options["user"] = conn.user
        options["password"] = conn.password or ""
    client = Client()
    try:
        await asyncio.wait_for(client.connect(**options), timeout=conn.timeout_s * 3)
    except (TimeoutError, NatsError, OSError) as exc:
        await _close_quietly(client, timeout_s=conn.timeout_s)  # else a refused (auth) socket stays open
        said = [
            error for error in errors if isinstance(error, NatsError)
        ]  # e.g. -ERR Authorization Violation
        cause = said[-1] if said else errors[-1] if errors else exc  # what a server said beats a reset
        raise CommandError(f"could not connect to {conn.url}: {_nats_text(cause)}") from exc
    return client


async def _close_quietly(client: Client, *, timeout_s: float) -> None:
    """Close within timeout_s whatever state the connection is in (also while being cancelled)."""
    try:
        await asyncio.wait_for(client.close(), timeout=timeout_s)
    except (TimeoutError, NatsError, OSError):
        pass


def run(verb: Callable[[Client], Awaitable[None]], conn: Connection) -> None:
    """Connect, run the verb, close; any operating failure becomes `nats: error: ...`, exit 1."""

    async def session() -> None:
        client = await connect(conn)
        try:
            await verb(client)
        finally:
            await _close_quietly(client, timeout_s=conn.timeout_s)

    try:
        asyncio.run(session())
    except ApplianceError as exc:
        fail(str(exc))
    except (TimeoutError, NatsError) as exc:
        fail(_nats_text(exc))
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)  # Ctrl-C ends `sub` and friends quietly, as in the nats CLI


def fail(text: str) -> NoReturn:
    click.echo(ERROR_PREFIX + text, err=True)
    sys.exit(1)


_NAME_FORBIDDEN = re.compile(r"[.*>\s/\\]")
NAME_CHARS_MAX = 255


class ApiName(click.ParamType[str]):
    """A stream or consumer name as nats-server accepts it; a bad one is refused before any request
    (it would otherwise land on an API subject nobody answers, and time out)."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text or len(text) > NAME_CHARS_MAX or _NAME_FORBIDDEN.search(text):
            rule = "names are 1-255 characters without '.', '*', '>', spaces, '/' or '\\'"
            fail(f"invalid name {text!r}: {rule}")
        return text


API_NAME = ApiName()


def _nats_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError | nats.errors.TimeoutError):
        return "nats: timeout"
    if isinstance(exc, nats.errors.NoRespondersError):
        return "nats: no responders available for request"
    return str(exc) or type(exc).__name__


async def api_request(client: Client, subject: str, body: JsonDict | None, *, timeout_s: float) -> JsonDict:
    """One JetStream API call; the decoded answer, or ApiError when it carries `error`."""
    payload = encode(body) if body is not None else b""
    try:
        reply = await client.request(subject, payload, timeout=timeout_s)
    except nats.errors.NoRespondersError as exc:
        raise CommandError(f"{_nats_text(exc)} ({subject}): is JetStream enabled?") from exc
    except nats.errors.TimeoutError as exc:
        raise CommandError(f"nats: timeout waiting for {subject}") from exc
    try:
        answer = json.loads(reply.data)
    except ValueError as exc:
        raise CommandError(f"invalid JSON answer on {subject}: {reply.data[:200]!r}") from exc
    if not isinstance(answer, dict):
        raise CommandError(f"unexpected answer on {subject}: {reply.data[:200]!r}")
    error = answer.get("error")
    if isinstance(error, dict):
        raise ApiError(
            code=int(error.get("code", 0)),
            err_code=int(error.get("err_code", 0)),
            description=str(error.get("description", "unknown error")),
        )
    return answer


async def paged(
    client: Client, subject: str, key: str, *, timeout_s: float, body: JsonDict | None = None
) -> tuple[list[Any], list[str]]:
    """Every item of a paged NAMES/LIST answer (offset paging), plus LIST's `missing` names."""
    items: list[Any] = []
    missing: list[str] = []
    for _ in range(limits.CLI_LIST_PAGES_MAX):
        answer = await api_request(
            client, subject, {**(body or {}), "offset": len(items)}, timeout_s=timeout_s
        )
        page = answer.get(key) or []
        items.extend(page)
        missing.extend(answer.get("missing") or [])
        if not page or len(items) >= int(answer.get("total", 0)):
            return items, missing
    raise CommandError(f"{subject}: more than {limits.CLI_LIST_PAGES_MAX} pages")


def encode(body: JsonDict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def print_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))
