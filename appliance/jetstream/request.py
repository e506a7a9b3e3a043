"""One JetStream API request and the helpers every handler shares: the response envelope
(`type`, then `error` or the fields), body decoding, and proposals to the meta group.

A handler either answers before it returns, or defers: it proposes to a RAFT group and answers
from the commit callback (`propose_meta(request, op, then)`, `request.later(fn)`), which may run
many loop turns later (a remote quorum). `run` gives a deferred step the same envelope for a
raised JsApiError as the first step, and counts and audits the request once, when it is answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.cluster.placement import PlacementError
from appliance.errors import LimitExceeded, NotLeader
from appliance.jetstream import advisories, errors
from appliance.jetstream.decode import JsonObject, decode_object, request_body
from appliance.jetstream.wire import go_json, header_value

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream
    from appliance.jetstream.stream import Stream

API_PREFIX = "$JS.API."
API_LEVEL = 5
TYPE_PREFIX = "io.nats.jetstream.api.v1."


class Request:
    """One API request: the account it arrived in, its subject tokens after $JS.API., and its body."""

    def __init__(
        self, ajs: AccountJetStream, tokens: list[str], reply: str, header: bytes, body: bytes
    ) -> None:
        self.ajs = ajs
        self.tokens = tokens
        self.reply = reply
        self.header = header
        self.body = body
        self.counted = True  # nats-server leaves successful MSG.GETs out of its API total
        self.audited = True  # answered by nats-server's API dispatcher (not a consumer's own subscription)
        self.response = b""  # the answer sent, for the API audit advisory
        self.deferred = False  # a step is waiting for a commit: the request is not finished yet
        self.on_error: Callable[[errors.JsApiError], None] | None = None  # dispatch's error envelope

    def run(self, step: Callable[[], None]) -> None:
        """Run one step of the handler; a raised JsApiError is answered; finish unless deferred."""
        self.deferred = False
        try:
            step()
        except errors.JsApiError as exc:
            self.deferred = False
            if self.on_error is None:
                raise
            self.on_error(exc)
        finally:
            if not self.deferred:
                self._finish()

    def later(self, step: Callable[[], None]) -> Callable[[], None]:
        """Defer: the returned callable runs `step` later (from a commit callback) via `run`."""
        self.deferred = True
        return lambda: self.run(step)

    def _finish(self) -> None:
        ajs = self.ajs
        if self.counted:
            ajs.api_total += 1  # nats-server counts a request once it is answered
        if self.response and self.audited:
            subject = API_PREFIX + ".".join(self.tokens)
            advisories.api_audit(ajs, subject, self.body, self.response, reply=self.reply)

    def respond(
        self,
        kind: str,
        fields: dict[str, object],
        *,
        error: errors.JsApiError | None = None,
        after_error: dict[str, object] | None = None,
        count_error: bool = True,
    ) -> None:
        out: dict[str, object] = {"type": TYPE_PREFIX + kind}
        if error is not None:
            out["error"] = error.as_json()
            if count_error:
                self.ajs.api_errors += 1
            out.update(after_error or {})
        else:
            out.update(fields)
        self.response = go_json(out)
        if self.reply:
            self.ajs.send(self.reply, self.response)

    def request_level(self) -> str:
        if not self.header:
            return "0"
        value = header_value(self.header, b"Nats-Required-Api-Level")
        return value.decode() if value else "0"


def needs_newer_api(header: bytes) -> bool:
    """nats-server's errorOnRequiredApiLevel: a Nats-Required-Api-Level header that is not a
    number, or a level above ours."""
    value = header_value(header, b"Nats-Required-Api-Level") if header else None
    if not value:
        return False
    try:
        return int(value) > API_LEVEL
    except ValueError:
        return True


def body_of(request: Request) -> bytes:
    return request_body(request.body)


def optional_object(request: Request, fields: dict[str, object], struct: str) -> JsonObject:
    body = body_of(request)
    return decode_object(body, fields, struct) if body else {}  # type: ignore[arg-type]


def stream_of(request: Request, name: str) -> Stream:
    stream = request.ajs.streams.get(name)
    if stream is None:
        raise errors.STREAM_NOT_FOUND.error()
    return stream


def propose_meta(request: Request, op: dict[str, object], then: Callable[[], None]) -> None:
    """Propose `op` to the meta group; `then` answers once it is committed and applied here.

    A proposal the group refuses at once (not the leader, too many pending) or loses later
    (leadership lost before it committed) is answered with an error, never left hanging.
    """
    after = request.later(then)
    fail = request.later(_not_committed)
    try:
        request.ajs.service.meta.propose(op, lambda ok: after() if ok else fail())
    except PlacementError as exc:
        request.deferred = False
        raise errors.CLUSTER_NO_PEERS.format(err=str(exc)) from None
    except (NotLeader, LimitExceeded) as exc:
        request.deferred = False
        raise errors.STREAM_GENERAL.format(err=f"meta proposal was not accepted: {exc}") from None


def _not_committed() -> None:
    raise errors.STREAM_GENERAL.format(err="meta proposal was not committed")
