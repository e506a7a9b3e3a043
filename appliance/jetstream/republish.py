"""Stream republish (stream config `republish: {src, dest, headers_only}`), as nats-server 2.15.1.

Once a message is stored, a stream with republish publishes a copy into its account on the
subject its transform gives: `src` (">" when left out) must match the stored subject, `dest`
names the copy's subject and may use `$N` and the mapping functions of transform.py. Every
subscriber of the account gets the copy, core clients on any worker and other streams alike, but
not the stream itself: create refuses a destination on the stream's own subjects, and the one
way left to it (an update with an empty dest, which becomes ">") makes nats-server 2.15.1 store
each copy again and republish it again, without end; here the stream drops its own copies. The
copy carries the stored headers followed by

    Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Time-Stamp, Nats-Last-Sequence

(and Nats-Msg-Size with `headers_only`, which sends no payload). Nats-Last-Sequence is the
sequence the previous message on the same subject had when this one was stored (0: none), for
gap detection by light clients such as KV watchers. A copy whose subject is not a valid publish
subject is not sent (nats-server suppresses it). Duplicates, refused messages and, in an interest
stream, messages nobody is interested in are not stored and so not republished. Mirrors and
sources republish what they store, with its headers (a source's Nats-Stream-Source included).

Checks (nats-server's checkStreamCfg, its texts, all 10052): the destination must not collide
with the stream's own subjects ("forms a cycle"), and src -> dest must be a transform nats-server
can build. An empty `dest` is accepted and republishes nothing; an update turns it into ">".
"""

from __future__ import annotations

import logging
import random

from appliance import limits
from appliance.jetstream import errors
from appliance.jetstream.decode import Kind, decode_object
from appliance.jetstream.subjects import subjects_overlap
from appliance.jetstream.transform import MappingError, Transform, build_steps
from appliance.jetstream.wire import rfc3339
from appliance.protocol.subjects import is_valid_publish_subject

FIELDS: dict[str, Kind] = {"src": "str", "dest": "str", "headers_only": "bool"}
FULL_WILDCARD = ">"
HEADER_START = b"NATS/1.0\r\n"

logger = logging.getLogger(__name__)


def _invalid(text: str) -> errors.JsApiError:
    return errors.STREAM_INVALID_CONFIG.format(err=text)


def parse_republish(
    value: object, *, subjects: list[str], subject_transform: dict[str, str] | None
) -> dict[str, object] | None:
    """The `republish` of a stream config in echo form, checked as nats-server checks it (after
    the subjects and the subject transform); None when there is none."""
    if value is None:
        return None
    obj = decode_object(value, FIELDS, "StreamConfigRequest.republish")
    src = str(obj.get("src") or "") or FULL_WILDCARD
    dest = str(obj.get("dest") or "")
    if (
        src == FULL_WILDCARD
        and dest == FULL_WILDCARD
        and subject_transform is not None
        and len(subjects) == 1
        and subject_transform.get("src") == subjects[0]
    ):
        # implicit republish: every message under the subject the stream's transform gave it
        src = dest = str(subject_transform.get("dest") or "")
    if any(subjects_overlap(dest, subject) for subject in subjects):
        raise _invalid("stream configuration for republish destination forms a cycle")
    try:
        compile_republish(src, dest)
    except MappingError:
        text = f"stream configuration for republish with transform from '{src}' to '{dest}' not valid"
        raise _invalid(text) from None
    echo: dict[str, object] = {"src": src, "dest": dest}
    if obj.get("headers_only"):
        echo["headers_only"] = True
    return echo


def settle_update(republish: dict[str, object] | None) -> dict[str, object] | None:
    """What an update stores: nats-server's update path turns an empty dest into ">", and
    refuses (10069) a src that can not be republished to it (create never checked it)."""
    if republish is None or republish.get("dest"):
        return republish
    src = str(republish.get("src") or "") or FULL_WILDCARD
    try:
        compile_republish(src, FULL_WILDCARD)
    except MappingError as exc:
        raise errors.STREAM_UPDATE.format(
            err=f"stream configuration for republish from '{src}' to '{FULL_WILDCARD}': {exc}"
        ) from None
    return {**republish, "src": src, "dest": FULL_WILDCARD}


def compile_republish(src: str, dest: str) -> Transform | None:
    """nats-server's NewSubjectTransform(src, dest): None for an empty dest (nothing is
    republished); MappingError when it cannot be built. Unlike a stream's or a source's
    transform, ValidateMapping's token checks are not run (a literal token may hold a space)."""
    if not dest:
        return None
    source = src or FULL_WILDCARD
    steps = build_steps(source, dest, check_tokens=False)
    wildcards = tuple(i for i, token in enumerate(source.split(".")) if token == "*")
    uses_random = any(step.kind == "random" for step in steps)
    return Transform(source, dest, steps, wildcards, random.Random() if uses_random else None)


class Republisher:
    """A stream's republish at run time: the subject of each copy and its header block."""

    __slots__ = ("_prefix", "_targets", "_transform", "headers_only")

    def __init__(self, stream: str, transform: Transform, *, headers_only: bool) -> None:
        self._transform = transform
        self._prefix = b"Nats-Stream: " + stream.encode() + b"\r\nNats-Subject: "
        self.headers_only = headers_only
        # subject -> target, for transforms without {{random()}} (a KV key is written again and again)
        self._targets: dict[str, bytes | None] | None = (
            None if any(step.kind == "random" for step in transform.steps) else {}
        )

    def target(self, subject: str) -> bytes | None:
        """The copy's subject, or None: src does not match, or the result cannot be published."""
        targets = self._targets
        if targets is not None and subject in targets:
            return targets[subject]
        out = self._transform.apply_bytes(subject.encode())
        if out is not None and not is_valid_publish_subject(out):
            out = None
        if targets is not None:
            if len(targets) >= limits.JS_REPUBLISH_TARGETS_CACHED:
                targets.clear()
            targets[subject] = out
        return out

    def header(self, stored: bytes, subject: str, seq: int, ts_ns: int, last_seq: int, size: int) -> bytes:
        """The copy's header block: the stored one (less its closing CRLF) and the republish lines."""
        lines = b"%s%s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\nNats-Last-Sequence: %d\r\n" % (
            self._prefix,
            subject.encode(),
            seq,
            rfc3339(ts_ns).encode(),
            last_seq,
        )
        if self.headers_only:
            lines += b"Nats-Msg-Size: %d\r\n" % size
        head = stored[:-2] if len(stored) >= 2 else HEADER_START
        return head + lines + b"\r\n"


def republisher_for(stream: str, republish: dict[str, object] | None) -> Republisher | None:
    if not republish:
        return None
    src, dest = str(republish.get("src") or ""), str(republish.get("dest") or "")
    try:
        transform = compile_republish(src, dest)
    except MappingError as exc:  # checked before it was stored: only a damaged record gets here
        logger.error("stream %s: republish from %r to %r not built: %s", stream, src, dest, exc)
        return None
    if transform is None:
        return None
    return Republisher(stream, transform, headers_only=bool(republish.get("headers_only")))
