"""One JetStream API request and the helpers every handler shares: the response envelope
(`type`, then `error` or the fields), body decoding, and proposals to the meta group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.jetstream import errors
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


def propose_meta(request: Request, op: dict[str, object]) -> None:
    result: list[bool] = []
    request.ajs.service.meta.propose(op, result.append)
    if result != [True]:
        raise errors.STREAM_GENERAL.format(err="meta proposal was not committed")
