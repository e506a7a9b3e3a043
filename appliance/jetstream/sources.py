"""Stream sources on one server (stream config `sources`), as nats-server 2.15.1 copies them.

A stream with sources appends every message of each source stream (of the same account) that
matches the source's filter_subject, from opt_start_seq / opt_start_time or the beginning, as a
new message of its own: same subject, headers and payload, a new sequence and time, and a
`Nats-Stream-Source: <name> <seq> <filter> <dest> <subject> <ident>` header naming where it came
from. Copies go through the stream's ordinary publish path (its RAFT log, limits, retention). A
tailer per source reads the source's store in batches; an internal subscription on the origin's
subjects wakes it when something is published there, and otherwise it looks again with a
doubling delay, so sourcing adds no code to anyone's publish path. On start the position of
each source is found again in the stream's own Nats-Stream-Source headers.

A mirror (stream config `mirror`) keeps the origin's sequences and times: its tailer proposes
batches of origin messages as one MIRROR operation of the stream's RAFT log, applied by
`apply_mirror` (a gap in the origin becomes deleted sequences, as nats-server's skipped ones). A
mirror has no subjects and no other sources, and its mirror config can not be updated.

Subject transforms (transform.py, every mapping function of nats-server) rename what is copied;
a message no transform matches is not copied. Limits: a copy the stream refuses (a discard-new
limit, the server's or the account's JetStream limit) stalls its source or mirror at that message,
tried again after a delay and never skipped, as nats-server retries a source or mirror from the
message it could not store. Not here (refused with 10052): external sources and mirrors.

In a cluster an origin this server holds no replica of is read through a push consumer on it,
as nats-server reads every origin (source_remote.py); an origin open here is read from its store.
"""

from __future__ import annotations

import base64
import hashlib
import weakref
from base64 import urlsafe_b64encode
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance import limits
from appliance.jetstream import errors, ops
from appliance.jetstream.decode import STRING, TIME, UINT64, GoSlice, GoStruct
from appliance.jetstream.host import Timer
from appliance.jetstream.source_remote import RemoteOrigin
from appliance.jetstream.storeview import count_live, first_seq_at_or_after_time, last_seq
from appliance.jetstream.subjects import is_valid_name, is_valid_subject, subject_is_subset, subjects_overlap
from appliance.jetstream.transform import Transform, compile_all, compile_transform, first_match
from appliance.jetstream.wire import append_headers, header_value, parse_rfc3339, rfc3339
from appliance.server.internal import InternalClient
from appliance.store.api import StoreLimitError

if TYPE_CHECKING:
    from appliance.jetstream.service import AccountJetStream
    from appliance.server.sublist import Subscription
    from appliance.jetstream.stream import Stream

HDR_SOURCE = b"Nats-Stream-Source"
TRANSFORM_TYPE = GoStruct("server.SubjectTransformConfig", {"src": STRING, "dest": STRING})
SOURCE_TYPE = GoStruct(
    "server.StreamSource",
    {
        "name": STRING,
        "opt_start_seq": UINT64,
        "opt_start_time": TIME,
        "filter_subject": STRING,
        "subject_transforms": GoSlice(TRANSFORM_TYPE, "[]server.SubjectTransformConfig"),
        "external": GoStruct("server.ExternalStream", {"api": STRING, "deliver": STRING}, pointer=True),
        "consumer": GoStruct(
            "server.StreamConsumerSource", {"name": STRING, "deliver_subject": STRING}, pointer=True
        ),
    },
    pointer=True,
)
ECHO_ORDER = ("name", "opt_start_seq", "opt_start_time", "filter_subject", "subject_transforms")
UNSUPPORTED = ("external", "consumer")


def parse_sources(value: object) -> list[dict[str, object] | None]:
    """The decoded `sources` of a stream config in echo form (a null entry stays None: the
    checks refuse it as nats-server does)."""
    if not isinstance(value, list):
        return []
    return [echo(item) if isinstance(item, dict) else None for item in value]


def parse_mirror(value: object) -> dict[str, object] | None:
    return echo(value) if isinstance(value, dict) else None


def echo(obj: dict[str, object]) -> dict[str, object]:
    """A decoded StreamSource as nats-server echoes it (omitempty), unsupported parts kept for
    the checks."""
    out: dict[str, object] = {"name": str(obj.get("name") or "")}
    for field_name in ECHO_ORDER[1:]:
        if obj.get(field_name):
            out[field_name] = obj[field_name]
    if "subject_transforms" in out:
        out["subject_transforms"] = [
            {"src": str((t or {}).get("src") or ""), "dest": str((t or {}).get("dest") or "")}
            for t in out["subject_transforms"]  # type: ignore[attr-defined]
        ]
    if "opt_start_time" in out:
        out["opt_start_time"] = rfc3339(parse_rfc3339(str(out["opt_start_time"])))
    for key in UNSUPPORTED:
        if obj.get(key):
            out[key] = obj[key]
    return out


def check_source(source: dict[str, object], *, mirror: bool) -> None:
    """One source's or the mirror's checks, in nats-server's order (checkStreamCfg)."""
    what = "mirror" if mirror else "source"
    filter_subject = str(source.get("filter_subject") or "")
    transforms = source.get("subject_transforms")
    if filter_subject and transforms:
        refusal = errors.MIRROR_TRANSFORMS_WITH_FILTER if mirror else errors.SOURCE_TRANSFORMS_WITH_FILTER
        raise refusal.error()
    if transforms:
        _check_transforms(transforms, mirror=mirror)
    if mirror and not is_valid_name(str(source.get("name") or "")):
        raise errors.MIRRORED_STREAM_NAME_INVALID.error()
    for key in UNSUPPORTED:
        if source.get(key):
            text = f"stream {what} {key} is not supported by this server"
            raise errors.STREAM_INVALID_CONFIG.format(err=text)


def check_filters(mirror: dict[str, object] | None, sources: list[dict[str, object]]) -> None:
    """The filter subjects nats-server checks when it adds the stream (after the config's checks,
    the name-in-use and limit checks), with its texts."""
    if mirror is not None and not mirror.get("subject_transforms"):
        subject = str(mirror.get("filter_subject") or "")
        if subject and not is_valid_subject(subject):
            text = f"subject filter '{subject}' for the mirror invalid subject"  # sic: no colon
            raise errors.STREAM_CREATE.format(err=text)
    for source in sources:
        subject = str(source.get("filter_subject") or "")
        if not source.get("subject_transforms") and subject and not is_valid_subject(subject):
            text = f"subject filter '{subject}' for the source: invalid subject"
            raise errors.STREAM_CREATE.format(err=text)


def _check_transforms(entries: object, *, mirror: bool) -> None:
    """A source's or mirror's subject_transforms, checked in nats-server's order: a mirror checks
    each transform and then its overlaps in one pass, a source all transforms first."""
    listed = entries if isinstance(entries, list) else []
    items = [entry if isinstance(entry, dict) else {} for entry in listed]
    sources = [str(entry.get("src") or "") for entry in items]
    of = "mirror" if mirror else "source"
    for outer, entry in enumerate(items):
        compile_transform(sources[outer], str(entry.get("dest") or ""), of=of)
        if mirror and any(
            inner != outer and (other == sources[outer] or subjects_overlap(sources[outer], other))
            for inner, other in enumerate(sources)
        ):
            raise errors.MIRROR_OVERLAPPING_SUBJECT_FILTERS.error()
    if not mirror:
        for outer, first in enumerate(sources):
            if any(inner != outer and subject_is_subset(first, other) for inner, other in enumerate(sources)):
                raise errors.SOURCE_OVERLAPPING_SUBJECT_FILTERS.error()


def source_key(source: dict[str, object]) -> str:
    """What makes two sources of one stream the same (nats-server's composeIName)."""
    return _key_of(source)


def check_update(old: dict[str, object] | None, new: dict[str, object] | None) -> None:
    """A mirror can be removed (the stream is promoted) but not added or changed."""
    if new is not None and new != old:
        raise errors.MIRROR_CONFIG_CHANGE.error()


@dataclass(slots=True)
class SourceState:
    name: str
    filter_subject: str
    next_seq: int  # the next source sequence to copy (0: not known yet)
    mirror: bool = False
    transforms: tuple[Transform, ...] = ()
    start_seq: int = 0
    start_time_ns: int = 0
    last_seq: int = 0  # the last source sequence copied
    active_ns: int = 0  # when the source was last read
    missing: bool = False
    retry_at_ns: int = 0  # a source or mirror whose last copy was refused copies again after this
    refused_seq: int = 0  # the origin sequence a source or mirror is stalled at (0: not stalled)
    copied_ahead: set[int] = field(default_factory=set)  # stored after it, not to copy again

    @property
    def key(self) -> str:
        """The source's filter as its Nats-Stream-Source header names it."""
        if self.transforms:
            return "\f".join(t.src for t in self.transforms)  # nats-server joins them with a form feed
        return self.filter_subject or ">"

    @property
    def dests(self) -> str:
        return "\f".join(t.dest for t in self.transforms) if self.transforms else ">"


class Sourcing:
    """The tailers of one stream's sources."""

    def __init__(self, ajs: AccountJetStream, stream: Stream) -> None:
        self.ajs = ajs
        self.stream = stream
        self.ident = _ident(ajs.account.name, stream.config.name)
        mirror = stream.config.mirror
        self.states = [
            SourceState(
                name=str(source["name"]),
                filter_subject=str(source.get("filter_subject") or ""),
                next_seq=0,
                mirror=mirror is not None,
                transforms=tuple(compile_all(source.get("subject_transforms"))),
                start_seq=int(str(source.get("opt_start_seq") or 0)),
                start_time_ns=_start_time(source),
            )
            for source in ([mirror] if mirror is not None else stream.config.sources)
        ]
        if mirror is not None:
            last = stream.store.state().last_seq
            if last:
                self.states[0].last_seq, self.states[0].next_seq = last, last + 1
        else:
            self._recover()
        self._timer: Timer | None = None
        self._delay_s = limits.JS_SOURCE_POLL_MIN_S
        self.stopped = False
        self._timer = ajs.call_later(0, self._poll)
        # a publish to an origin's subjects wakes the tailers at once (they poll otherwise)
        self._watched: set[str] = set()
        self._subs: list[Subscription] = []
        # each copy's PubAck comes back here: a refused one stalls its source (see _on_copy_ack);
        # an own client, as the account's (which sends the PubAcks) gets no echo of its messages
        self._ack_prefix = f"{ACK_PREFIX}{self.ident}."
        self._acks: InternalClient | None = None
        if mirror is None:
            self._acks = InternalClient(ajs.server, ajs.account, f"JetStream sources {stream.config.name}")
            self._acks.subscribe(f"{self._ack_prefix}>".encode(), self._on_copy_ack)
        # origins not open on this server (clustered only): read through a consumer there
        self._clustered = ajs.service.meta.clustered
        self._remotes: dict[int, RemoteOrigin] = {}

    def _recover(self) -> None:
        """Each source's position: after the last message the stream copied from it."""
        store = self.stream.store
        state = store.state()
        wanted = {(s.name, s.key): s for s in self.states}
        seq = state.last_seq
        lowest = max(state.first_seq, state.last_seq - limits.JS_SOURCE_RECOVERY_SCAN_MAX)
        while wanted and seq >= lowest and seq > 0:
            msg = store.load(seq)
            seq -= 1
            if msg is None or not msg.headers:
                continue
            value = header_value(msg.headers, HDR_SOURCE)
            if value is None:
                continue
            parts = value.decode(errors="replace").split(" ")
            if len(parts) < 3 or not parts[1].isdigit():
                continue
            found = wanted.pop((parts[0], parts[2]), None)
            if found is not None:
                found.last_seq = int(parts[1])
                found.next_seq = found.last_seq + 1

    def _watch(self, origin: Stream) -> None:
        name = origin.config.name
        if name in self._watched or len(self._watched) >= limits.JS_SOURCE_WATCHED_MAX:
            return
        self._watched.add(name)
        for subject in origin.config.subjects:
            self._subs.append(self.ajs.client.subscribe(subject.encode(), self._on_origin_publish))

    def _on_origin_publish(
        self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes
    ) -> None:
        if self.stopped or self._delay_s == 0:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._delay_s = 0  # awake until a poll finds nothing; the origin stores first (call_soon order)
        self._timer = self.ajs.call_later(0, self._poll)

    def _poll(self) -> None:
        self._timer = None
        self._delay_s = max(self._delay_s, limits.JS_SOURCE_POLL_MIN_S)
        if self.stopped or self.stream.deleted:
            return
        progress = 0
        for source in self.states:
            progress += self._copy(source)
        if progress:
            self._delay_s = limits.JS_SOURCE_POLL_MIN_S
            self._timer = self.ajs.call_later(0, self._poll)
            return
        self._timer = self.ajs.call_later(self._delay_s, self._poll)
        self._delay_s = min(self._delay_s * 2, limits.JS_SOURCE_POLL_MAX_S)

    def _copy(self, source: SourceState) -> int:
        origin = self.ajs.streams.get(source.name)
        if origin is None and self._clustered:  # the origin lives on other servers
            self._remote(source).tick()
            return 0
        remote = self._remotes.pop(self.states.index(source), None)
        if remote is not None:  # the origin is open here now: read its store
            remote.close()
        source.missing = origin is None or origin is self.stream
        if origin is None or origin is self.stream:
            return 0
        store = origin.store
        source.active_ns = self.ajs.now_ns()
        self._watch(origin)
        if source.next_seq == 0:
            source.next_seq = self._start(source, origin)
        if source.retry_at_ns > source.active_ns:
            return 0  # a refused message is tried again once the delay is over
        source.retry_at_ns = 0
        if source.mirror:
            return self._mirror(source, origin)
        index = self.states.index(source)
        # stalled at a refused copy: only that message, until its PubAck says it is stored
        most = 1 if source.refused_seq else limits.JS_SOURCE_BATCH_MAX
        read = 0  # messages read this turn, copied or not (bounds the work of one turn)
        for msg in store.scan(source.next_seq, source.filter_subject or ">"):
            source.next_seq = msg.seq + 1
            read += 1
            if source.copied_ahead and msg.seq in source.copied_ahead:
                source.copied_ahead.discard(msg.seq)  # stored while an earlier copy was refused
                continue
            self.copy_one(source, index, msg.seq, msg.subject, msg.headers, msg.payload)
            if read >= most:
                break
        return read

    def copy_one(self, source: SourceState, index: int, seq: int, subject: str, headers: bytes,
                 payload: bytes) -> None:
        """Publish one origin message of a source to the stream, with its Nats-Stream-Source
        header (a message no transform matches is not copied); its PubAck comes to _on_copy_ack."""
        renamed = first_match(list(source.transforms), subject) if source.transforms else subject
        if renamed is not None:
            value = f"{source.name} {seq} {source.key} {source.dests} {subject} {self.ident}"
            header = append_headers(headers, [(HDR_SOURCE.decode(), value)])
            self.stream.on_publish(renamed, f"{self._ack_prefix}{index}.{seq}", header, payload)
            source.last_seq = seq

    def _remote(self, source: SourceState) -> RemoteOrigin:
        index = self.states.index(source)
        remote = self._remotes.get(index)
        if remote is None:
            remote = self._remotes[index] = RemoteOrigin(self, index, source)
        return remote

    def mirror_batch(self, source: SourceState,
                     got: list[tuple[int, str, bytes, bytes, int]]) -> list[list[object]]:
        """Delivered origin messages as a MIRROR operation's entries (those a transform matches)."""
        batch = []
        for seq, subject, headers, payload, ts_ns in got:
            entry = mirror_entry(source, seq, subject, headers, payload, ts_ns)
            if entry is not None:
                batch.append(entry)
        return batch

    def _on_copy_ack(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        """A copied message's PubAck. A refused copy (a discard-new limit, the server's or the
        account's JetStream limit, ...) stalls its source there, as nats-server retries a source
        from the message it could not store: copying starts again from it after a delay. Copies
        of later messages already in flight that were stored (a per-subject limit refuses only
        some) are remembered and not copied again."""
        refused = b'"error"' in data
        if self.stopped or (not refused and not any(s.refused_seq for s in self.states)):
            return  # the common case: a stored copy, no source stalled
        index_text, _, seq_text = subject.decode()[len(self._ack_prefix) :].partition(".")
        if not index_text.isdigit() or not seq_text.isdigit() or int(index_text) >= len(self.states):
            return
        source, seq = self.states[int(index_text)], int(seq_text)
        if not refused:
            if source.refused_seq and seq > source.refused_seq:
                if len(source.copied_ahead) < limits.JS_SOURCE_BATCH_MAX:
                    source.copied_ahead.add(seq)
            elif seq == source.refused_seq:
                source.refused_seq = 0  # the refused message is stored now
            return
        if seq < source.next_seq:
            source.next_seq, source.last_seq = seq, seq - 1
            source.refused_seq = seq
            source.retry_at_ns = self.ajs.now_ns() + int(limits.JS_SOURCE_POLL_MAX_S * 1e9)

    def _mirror(self, source: SourceState, origin: Stream) -> int:
        batch: list[list[object]] = []
        read = 0
        for msg in origin.store.scan(source.next_seq, source.filter_subject or ">"):
            read += 1
            entry = mirror_entry(source, msg.seq, msg.subject, msg.headers, msg.payload, msg.timestamp_ns)
            if entry is None:  # not matched: a gap in the mirror, as a filtered-out message
                source.next_seq = msg.seq + 1
                if read >= limits.JS_SOURCE_BATCH_MAX:
                    break
                continue
            batch.append(entry)
            if read >= limits.JS_SOURCE_BATCH_MAX:
                break
        if not batch:
            return read
        self.propose_mirror(source, batch, lambda: None)
        return read

    def propose_mirror(self, source: SourceState, batch: list[list[object]],
                       then: Callable[[], None]) -> None:
        """Propose a batch of origin messages (mirror_entry's) as one MIRROR operation; `then`
        once it is applied. Raises what Stream.propose_op raises (NotLeader, LimitExceeded)."""
        last = int(str(batch[-1][0]))
        body: dict[str, object] = {"m": batch, "p": source.last_seq}
        source.next_seq, source.last_seq = max(source.next_seq, last + 1), last

        def on_applied(_stored: object) -> None:
            mirrored = last_seq(self.stream.store)
            if mirrored < last:  # stopped at a refused message: copy again from there, later
                source.last_seq, source.next_seq = mirrored, mirrored + 1
                source.refused_seq = mirrored + 1
                source.retry_at_ns = self.ajs.now_ns() + int(limits.JS_SOURCE_POLL_MAX_S * 1e9)
            else:
                source.refused_seq = 0
            then()

        self.stream.propose_op(ops.KIND_MIRROR, body, on_applied)

    def _start(self, source: SourceState, origin: Stream) -> int:
        if source.start_seq:
            return source.start_seq
        if source.start_time_ns:
            found = first_seq_at_or_after_time(origin.store, source.start_time_ns)
            return found if found else origin.store.state().last_seq + 1
        return 1

    def info(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        now = self.ajs.now_ns()
        for source in self.states:
            entry: dict[str, object] = {"name": source.name}
            origin = self.ajs.streams.get(source.name)
            remote = self._remotes.get(len(out))
            lag = remote.lag if remote is not None else 0
            if origin is not None and source.next_seq:
                filters = [source.filter_subject] if source.filter_subject else []
                lag = count_live(origin.store, source.next_seq, filters)
                if source.refused_seq:
                    # nats-server's lag while stalled: the refused message's pending count, less one
                    lag = max(lag - 2, 0)
            entry["lag"] = lag
            if source.last_seq:
                entry["seq"] = source.last_seq
            entry["active"] = now - source.active_ns if source.active_ns else -1
            if source.filter_subject:
                entry["filter_subject"] = source.filter_subject
            if source.transforms:
                entry["subject_transforms"] = [{"src": t.src, "dest": t.dest} for t in source.transforms]
            if source.missing:
                entry["error"] = errors.STREAM_NOT_FOUND.error().as_json()
            out.append(entry)
        return out

    def stop(self) -> None:
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for sub in self._subs:
            self.ajs.client.unsubscribe(sub)
        self._subs.clear()
        if self._acks is not None:
            self._acks.close()
            self._acks = None
        for remote in self._remotes.values():
            remote.close()
        self._remotes.clear()


def mirror_entry(source: SourceState, seq: int, subject: str, headers: bytes, payload: bytes,
                 ts_ns: int) -> list[object] | None:
    """One origin message as a MIRROR operation carries it (None: no transform matches it)."""
    renamed = first_match(list(source.transforms), subject) if source.transforms else subject
    if renamed is None:
        return None
    return [seq, renamed, base64.b64encode(headers).decode(), base64.b64encode(payload).decode(), ts_ns]


def _key_of(echo: dict[str, object]) -> str:
    transforms = echo.get("subject_transforms")
    if isinstance(transforms, list) and transforms:
        return "\f".join(str(t["src"]) or ">" for t in transforms)
    return str(echo.get("filter_subject") or ">")


def _start_time(source: dict[str, object]) -> int:
    return parse_rfc3339(str(source["opt_start_time"])) if source.get("opt_start_time") else 0


ACK_PREFIX = "$JSSRC."  # PubAcks of a stream's source copies: $JSSRC.<ident>.<source index>.<origin seq>


def _ident(account: str, stream: str) -> str:
    return urlsafe_b64encode(hashlib.sha256(f"{account} {stream}".encode()).digest()).decode()[:8]


_running: weakref.WeakKeyDictionary[Stream, Sourcing] = weakref.WeakKeyDictionary()


def start(ajs: AccountJetStream, stream: Stream) -> None:
    """(Re)start the tailers of a stream after it opened or its config changed."""
    stop(stream)
    if stream.config.sources or stream.config.mirror:
        _running[stream] = Sourcing(ajs, stream)


def stop(stream: Stream) -> None:
    sourcing = _running.pop(stream, None)
    if sourcing is not None:
        sourcing.stop()


def info(stream: Stream) -> list[dict[str, object]]:
    sourcing = _running.get(stream)
    return sourcing.info() if sourcing is not None else []


def mirror_info(stream: Stream) -> dict[str, object]:
    """`mirror` of stream info: as a source's without seq; the filter once the mirror ran."""
    found = info(stream)
    if not found:
        return {"name": str((stream.config.mirror or {}).get("name", "")), "lag": 0, "active": -1}
    entry = found[0]
    entry.pop("seq", None)
    if entry["active"] == -1:
        entry.pop("filter_subject", None)
    return entry


def _admission(stream: Stream) -> Callable[[ops.InMsg], object]:
    from appliance.jetstream.resources import PublishGuard  # resources imports stream, which imports us

    guard = stream.guard
    return guard.admission(stream) if isinstance(guard, PublishGuard) else (lambda _msg: None)


def apply_mirror(stream: Stream, body: dict[str, object]) -> int:
    """Apply one MIRROR operation: origin messages stored under their own sequences and times;
    sequences the origin does not have (deleted, or filtered out) become deleted ones here.

    A message the mirror's limits refuse (the server's or the account's JetStream limit, a
    discard-new max_msgs/max_bytes) stops the batch there, as nats-server's mirror stalls at such
    a message and retries it later instead of skipping it. A batch proposed behind one that
    stopped short (`p`, the origin sequence its proposer believed the mirror at, is past the
    mirror's last sequence) is not applied. Returns the messages stored."""
    store = stream.store
    if int(str(body.get("p", -1))) > last_seq(store):
        return 0
    refusal = _admission(stream)
    stored: list[ops.InMsg] = []
    seqs: list[int] = []
    batch = body.get("m")
    assert isinstance(batch, list)
    try:
        for seq, subject, header, payload, ts_ns in batch:
            last = store.state().last_seq
            if seq <= last:
                continue
            msg = ops.InMsg(subject, base64.b64decode(header), base64.b64decode(payload), ts_ns)
            if refusal(msg) is not None:
                break
            if seq > last + 1:
                if store.state().msgs == 0:
                    store.compact(seq)
                else:
                    for _ in range(seq - last - 1):  # a gap: deleted sequences, as nats-server skips them
                        (gap,) = stream.append_mirrored([ops.InMsg(subject, b"", b"", ts_ns)])
                        store.delete(gap)
            seqs.append(stream.mirror_one(msg))
            stored.append(msg)
    except StoreLimitError:
        pass  # discard new: the mirror stops at this message
    if seqs:
        stream.stored_mirrored(stored, seqs)
    return len(seqs)
