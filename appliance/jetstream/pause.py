"""Consumer pause and resume (ADR-48), as nats-server 2.15.1 does it.

`$JS.API.CONSUMER.PAUSE.<stream>.<consumer>` with `{"pause_until": <time>}` sets the consumer's
config `pause_until` through the meta group (so a pause survives a restart); an empty request
clears it. A consumer whose pause_until lies in the future delivers nothing: pull requests wait
(no_wait ones end with 404 at once), push deliveries hold. A timer resumes it at pause_until.
Every change of pause_until, and the resume, sends a `consumer_pause` advisory. Consumer info
shows `paused` and `pause_remaining` while paused; `_nats.req.level` is 1 for a paused config.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING

from appliance.jetstream import advisories, errors
from appliance.jetstream.config import REQUEST_LEVEL_KEY, ConsumerConfig
from appliance.jetstream.host import Timer
from appliance.jetstream.request import Request, optional_object, propose_meta, stream_of
from appliance.jetstream.wire import ZERO_TIME, parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from appliance.jetstream.consumer import Consumer

NS = 1_000_000_000
PAUSE_FIELDS: dict[str, object] = {"pause_until": "time"}
PAUSE_EXTRAS: dict[str, object] = {"paused": False, "pause_until": ZERO_TIME}

# per consumer: when its pause ends (ns) and the timer that resumes it
_until: weakref.WeakKeyDictionary[Consumer, int] = weakref.WeakKeyDictionary()
_timers: weakref.WeakKeyDictionary[Consumer, Timer] = weakref.WeakKeyDictionary()


def parse_pause_until(text: str) -> int:
    """Unix ns of a pause_until; a bad time is 10025 with Go's time.Parse wording."""
    try:
        return parse_rfc3339(text)
    except ValueError:
        raise errors.INVALID_JSON.format(
            err=f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse "{text}" as "2006"'
        ) from None


def normalise(config: ConsumerConfig) -> None:
    """pause_until echoed as Go marshals it; a paused config needs API level 1."""
    if config.pause_until:
        config.pause_until = rfc3339(parse_pause_until(config.pause_until))
        config.metadata[REQUEST_LEVEL_KEY] = max(config.metadata.get(REQUEST_LEVEL_KEY, "0"), "1")


def keep_pause(config: ConsumerConfig, existing: Consumer | None) -> None:
    """A create/update of an existing consumer keeps its pause: only the PAUSE API changes it."""
    if existing is not None:
        config.pause_until = existing.config.pause_until
        config.metadata[REQUEST_LEVEL_KEY] = existing.config.metadata.get(REQUEST_LEVEL_KEY, "0")


# --- the consumer side ------------------------------------------------------------------------


def arm(consumer: Consumer, *, previous: str | None) -> None:
    """After a consumer opens (previous=None) or its config changed: (re)start the pause, and
    advise when pause_until changed (or a new consumer was created paused)."""
    until_text = consumer.config.pause_until
    until = parse_rfc3339(until_text) if until_text else 0
    timer = _timers.pop(consumer, None)
    if timer is not None:
        timer.cancel()
    now = consumer.host.now_ns()
    if until > now:
        _until[consumer] = until
        _timers[consumer] = consumer.host.call_later((until - now) / NS, lambda: _resume(consumer, until))
    else:
        _until.pop(consumer, None)
    if previous is not None and previous != until_text:
        advisories.consumer_pause(consumer, until > now, until)


def announce_created(consumer: Consumer) -> None:
    if consumer.config.pause_until:
        until = parse_rfc3339(consumer.config.pause_until)
        advisories.consumer_pause(consumer, until > consumer.host.now_ns(), until)


def holds(consumer: Consumer) -> bool:
    """True while the consumer is paused (checked once per delivery turn)."""
    until = _until.get(consumer)
    return until is not None and until > consumer.host.now_ns()


def _resume(consumer: Consumer, until: int) -> None:
    _timers.pop(consumer, None)
    if consumer.deleted or _until.get(consumer) != until:
        return
    del _until[consumer]
    advisories.consumer_pause(consumer, False, until)
    consumer.on_removed()  # recount pending and deliver what waited


def info_fields(consumer: Consumer) -> dict[str, object]:
    """`paused` and `pause_remaining` of consumer info while paused."""
    until = _until.get(consumer)
    now = consumer.host.now_ns()
    if until is None or until <= now:
        return {}
    return {"paused": True, "pause_remaining": until - now}


# --- the API ----------------------------------------------------------------------------------


def consumer_pause(request: Request) -> None:
    obj = optional_object(request, PAUSE_FIELDS, "JSApiConsumerPauseRequest")
    text = str(obj.get("pause_until") or "")
    until = parse_pause_until(text) if text else 0
    stream = stream_of(request, request.tokens[2])
    consumer = stream.consumers.get(request.tokens[3])
    if consumer is None:
        raise errors.CONSUMER_NOT_FOUND.error()
    config = dataclasses.replace(
        consumer.config, metadata=dict(consumer.config.metadata), pause_until=rfc3339(until) if until else ""
    )
    config.metadata[REQUEST_LEVEL_KEY] = "1" if until else "0"

    def paused() -> None:
        now = request.ajs.now_ns()
        fields: dict[str, object] = {
            "paused": until > now, "pause_until": rfc3339(until) if until else ZERO_TIME
        }
        if until > now:
            fields["pause_remaining"] = until - now
        request.respond("consumer_pause_response", fields)

    op = {
        "op": "consumer_put",
        "acc": request.ajs.account.name,
        "stream": stream.config.name,
        "config": config.to_json(dynamic_metadata=False),
        "created": consumer.created_ns,
    }
    propose_meta(request, op, paused)
