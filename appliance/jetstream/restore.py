"""`$JS.API.STREAM.RESTORE.<stream>`: a stream restored from a backup sent in chunks, as nats-server 2.15.

The request holds the stream's config (and the backup's state); it is checked as a stream create
is, and refused with 10130 when the stream exists. The answer names a `deliver_subject`
(`$JS.SNAPSHOT.RESTORE.<stream>.<id>`); the client sends the backup there chunk by chunk, each
as a request: an empty answer acknowledges a chunk (the client sends the next one only then:
that is the flow control), an error ends the restore (`stream_create_response`, 10062 "restore
failed: ..."). An empty chunk ends the upload; its answer is the `stream_create_response` with
the restored stream's info, or the error. A chunk without a reply subject, or no chunk for
RESTORE_STALL_S, abandons the restore.

Each chunk is decoded at once (S2 frames, then the archive) and its messages are written to a
store under `<account>/_restore/<id>` with their own sequences and times; memory stays bounded by
one chunk and one message. Only at the end does the stream exist: the store moves into place and
the stream and its consumers (config and state) are created through the meta group. Backups made
by nats-server (its v2 format) restore the same way.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.cluster.placement import PlacementError
from appliance.errors import ApplianceError, LimitExceeded, NotLeader
from appliance.jetstream import advisories, errors, resources
from appliance.jetstream.api_streams import check_overlap, stream_info
from appliance.jetstream.backup import advise, is_empty_request
from appliance.jetstream.config import (
    CONSUMER_FIELDS,
    STREAM_TYPE,
    StreamConfig,
    parse_consumer_config,
    parse_stream_config,
)
from appliance.jetstream.decode import decode_object
from appliance.jetstream.request import TYPE_PREFIX, Request, body_of
from appliance.jetstream.stream import HDR_TTL, parse_ttl, store_limits
from appliance.jetstream.wire import go_json, header_value, parse_rfc3339, rfc3339
from appliance.protocol.subjects import is_valid_publish_subject
from appliance.store import api as store_api
from appliance.store import archive, s2frame
from appliance.store.filestore import FileStoreConfig, FileStreamStore
from appliance.store.memory import MemoryStreamStore

if TYPE_CHECKING:
    from appliance.jetstream.host import Timer
    from appliance.jetstream.stream import Stream
    from appliance.jetstream.service import AccountJetStream

logger = logging.getLogger(__name__)

RESTORE_FIELDS: dict[str, object] = {"config": "object", "state": "object"}
RESTORE_STALL_S = 5.0
RESTORE_BATCH_MSGS = 1024
SEQ_LIMIT = 1 << 63  # sequences and counters are int64 inside the store and consumer state


def stream_restore(request: Request) -> None:
    body = body_of(request)
    if is_empty_request(body):
        raise errors.BAD_REQUEST.error()
    obj = decode_object(body, RESTORE_FIELDS, "JSApiStreamRestoreRequest")  # type: ignore[arg-type]
    name = request.tokens[2]
    config_obj = decode_object(obj.get("config") or {}, STREAM_TYPE.fields, "StreamConfig")
    if not config_obj.get("name"):
        config_obj["name"] = name
    if config_obj["name"] != name:
        raise errors.STREAM_MISMATCH.error()
    if "/" in name or "\\" in name:
        raise errors.STREAM_NAME_CONTAINS_PATH_SEPARATORS.error()
    config = parse_stream_config(config_obj, request_level=request.request_level())
    ajs = request.ajs
    resources.check_stream_create(ajs, config)
    if name in ajs.streams or name in ajs.restoring:
        raise errors.STREAM_NAME_EXIST_RESTORE_FAILED.error()
    client = advisories.client_info(ajs, advisories.requester(ajs, request.reply))
    advise(ajs, "RESTORE_CREATE", "restore_create", name, {"client": client})
    session = RestoreSession(ajs, config, client)
    request.respond("stream_restore_response", {"deliver_subject": session.subject})
    logger.info("Starting restore for stream '%s > %s'", ajs.account.name, name)


def _restore_failed(exc: Exception) -> errors.JsApiError:
    """nats-server's NewJSStreamRestoreError(err, Unless(err)): an API error stays as it is."""
    if isinstance(exc, errors.JsApiError):
        return exc
    return errors.STREAM_RESTORE.format(err=str(exc))


class RestoreSession:
    """One restore in progress (module doc)."""

    def __init__(self, ajs: AccountJetStream, config: StreamConfig, client: dict[str, object]) -> None:
        self.ajs = ajs
        self.client = client
        self.started_ns = ajs.now_ns()
        self.config = config
        self.name = config.name
        self.id = advisories.new_id(ajs.rng)
        self.subject = f"$JS.SNAPSHOT.RESTORE.{self.name}.{self.id}"
        self.frames = s2frame.FrameReader()
        self.archive = archive.ArchiveReader()
        self.state: dict[str, object] | None = None
        self.consumers_left = 0
        self.consumers: list[tuple[dict[str, object], str]] = []  # (config JSON, seed state)
        self.store: store_api.StreamStore | None = None
        self.last_seq = 0
        self.bytes = 0
        self.workdir = os.path.join(restore_dir(ajs.service.root, ajs.account.name), self.id)
        self.done = False
        self.failure: Exception | None = None  # the backup is bad: the upload is drained, then refused
        self._max_payload = ajs.server.options.max_payload
        ajs.restoring[self.name] = self
        self._sub = ajs.client.subscribe(self.subject.encode(), self._on_chunk)
        self._timer: Timer | None = ajs.call_later(RESTORE_STALL_S, self._stalled)

    # --- chunks --------------------------------------------------------------------------------

    def _on_chunk(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        if self.done:
            return
        if not reply:
            self.abandon("requires reply subject for each chunk")
            return
        reply_s = reply.decode()
        body = data[len(header) :] if header is not None else data
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not body:
            if self.failure is not None:
                self._fail(reply_s, self.failure)
            else:
                self._complete(reply_s)
            return
        if self.failure is None:
            try:
                self._feed(body)
            except (ApplianceError, OSError, ValueError) as exc:
                # nats-server finds a bad backup while the upload goes on: the chunks are still
                # acknowledged and the answer to the last (empty) one carries the error
                self.failure = exc
                logger.warning("Restore failed for stream '%s > %s': %s", self.ajs.account.name, self.name, exc)
                self._discard()
        self.bytes += len(body)
        self._timer = self.ajs.call_later(RESTORE_STALL_S, self._stalled)
        self.ajs.send(reply_s, b"")

    def _feed(self, body: bytes) -> None:
        batch: list[store_api.StoredMsg] = []
        for item in self.archive.feed(self.frames.feed(body)):
            if self.state is None:
                self._begin(item)
            elif self.consumers_left:
                self._consumer(item)
            elif not item.is_end:
                msg = self._message(item)
                if msg is not None:
                    batch.append(msg)
                    if len(batch) >= RESTORE_BATCH_MSGS:
                        self._append(batch)
                        batch = []
        self._append(batch)

    def _begin(self, item: archive.Entry) -> None:
        if item.name != archive.STATE_NAME:
            raise ApplianceError("expected state.json first")
        try:
            state = json.loads(item.payload)
        except ValueError as exc:
            raise ApplianceError(f"error in state.json: {exc}") from None
        if not isinstance(state, dict):
            raise ApplianceError("error in state.json: not an object")
        self.state = state
        self.consumers_left = _uint(state.get("consumer_count", 0), "consumer_count")
        first_seq = _uint(state.get("first_seq", 0), "first_seq")
        # the account and server must have room for the whole backup (nats-server reserves it)
        backup_bytes = _uint(state.get("bytes", 0), "bytes")
        resources.check_stream_create(self.ajs, replace(self.config, max_bytes=max(self.config.max_bytes, backup_bytes)))
        self.store = self._open_store()
        if first_seq > 1:
            self.store.compact(first_seq)  # start at the backup's first sequence
        self.last_seq = max(first_seq - 1, 0)

    def _open_store(self) -> store_api.StreamStore:
        limits = store_limits(self.config)
        if self.config.storage == "memory":
            return MemoryStreamStore(limits)
        directory = os.path.join(self.workdir, "msgs")
        os.makedirs(directory, exist_ok=True)
        return FileStreamStore(
            FileStoreConfig(directory=directory, limits=limits, sync_always=False),
            sealer=self.ajs.service.sealer,
        )

    def _consumer(self, item: archive.Entry) -> None:
        name = item.name.removeprefix(archive.CONSUMER_PREFIX)
        if name == item.name or not name:
            raise ApplianceError(f"expected consumer, found {item.name!r}")
        try:
            record = json.loads(item.payload)
        except ValueError as exc:
            raise ApplianceError(f"failed to decode consumer {name!r} state: {exc}") from None
        if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
            raise ApplianceError(f"consumer {name!r} is missing config")
        if not isinstance(record.get("state"), dict):
            raise ApplianceError(f"consumer {name!r} is missing state")
        self.consumers_left -= 1
        known = {k: v for k, v in record["config"].items() if k in CONSUMER_FIELDS}
        config_obj = decode_object(known, CONSUMER_FIELDS, "ConsumerConfig")  # type: ignore[arg-type]
        config_obj.setdefault("name", name)
        if config_obj.get("durable_name") and config_obj["durable_name"] != config_obj["name"]:
            config_obj["name"] = config_obj["durable_name"]
        config = parse_consumer_config(config_obj, stream=self.config, ephemeral=not config_obj.get("durable_name"))
        self.consumers.append((config.to_json(dynamic_metadata=False), seed_state(record["state"])))

    def _message(self, item: archive.Entry) -> store_api.StoredMsg | None:
        seq = item.seq
        if seq == 0:
            raise ApplianceError("expected message sequence")
        if seq <= self.last_seq:
            raise ApplianceError(f"message sequence {seq} out of order")
        if seq >= SEQ_LIMIT or not is_valid_publish_subject(item.name.encode()):
            raise ApplianceError(f"message sequence {seq} is not a valid message")
        if item.header_size + item.payload_size > self._max_payload:
            raise ApplianceError(f"message sequence {seq} exceeds maximum payload size")
        if 0 <= self.config.max_msg_size < item.header_size + item.payload_size:
            raise ApplianceError(f"message sequence {seq} exceeds maximum message size")
        self.last_seq = seq
        headers = item.headers
        ttl = header_value(headers, HDR_TTL) if headers else None
        if ttl is not None:
            ttl_ns = parse_ttl(ttl)
            if ttl_ns is not None and item.timestamp + ttl_ns < self.ajs.now_ns():
                return None  # expired: the sequence stays a gap, as nats-server restores it
        return store_api.StoredMsg(seq, item.name, headers, item.payload, item.timestamp)

    def _append(self, batch: list[store_api.StoredMsg]) -> None:
        if batch:
            assert self.store is not None
            self.store.append_restored(batch)  # type: ignore[attr-defined]

    # --- the end -------------------------------------------------------------------------------

    def _complete(self, reply: str) -> None:
        try:
            self.frames.finish()
            self.archive.finish()
            self._install(lambda stream: self._installed(reply, stream), lambda exc: self._fail(reply, exc))
        except (ApplianceError, OSError, ValueError) as exc:
            self._fail(reply, exc)

    def _installed(self, reply: str, stream: Stream) -> None:
        self._close()
        self._advise_complete()
        info = stream_info(stream)
        self.ajs.send(reply, go_json({"type": TYPE_PREFIX + "stream_create_response", **info}))
        logger.info(
            "Completed restore of %d bytes for stream '%s > %s'", self.bytes, self.ajs.account.name, self.name
        )

    def _install(self, done: Callable[[Stream], None], failed: Callable[[ApplianceError], None]) -> None:
        """Move the restored store into place and propose the stream and its consumers to the
        meta group; done(stream) once all are committed and open, failed(error) otherwise."""
        ajs = self.ajs
        if self.name in ajs.streams:
            raise errors.STREAM_NAME_EXIST_RESTORE_FAILED.error()
        try:
            check_overlap(ajs, self.config)
        except errors.JsApiError as exc:  # nats-server wraps what adding the stream says
            raise ApplianceError(f"error adding stream: {exc.description} ({exc.entry.err_code})") from None
        assert self.state is not None and self.store is not None
        last_seq = max(self.last_seq, _uint(self.state.get("last_seq", 0), "last_seq"))
        store = self.store
        store.finish_restore(last_seq, self._last_ts_ns(store))  # type: ignore[attr-defined]
        if isinstance(store, FileStreamStore):
            store.close()
            target = ajs.stream_dir(self.name)
            shutil.rmtree(target, ignore_errors=True)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(self.workdir, target)
            _fsync_dir(os.path.dirname(target))
        else:
            ajs.restored_stores[self.name] = store
        self.store = None
        now = ajs.now_ns()
        ops: list[dict[str, object]] = [
            {"op": "stream_put", "acc": ajs.account.name, "config": self.config.storage_record(), "created": now}
        ]
        for config_json, seed in self.consumers:
            ops.append(
                {
                    "op": "consumer_put",
                    "acc": ajs.account.name,
                    "stream": self.name,
                    "config": config_json,
                    "created": now,
                    "state": seed,
                }
            )

        def opened() -> None:
            ajs.restored_stores.pop(self.name, None)
            stream = ajs.streams.get(self.name)
            if stream is None:
                why = ajs.service.failures.get((ajs.account.name, self.name), "stream could not be opened")
                failed(ApplianceError(why))
                return
            advisories.stream_action(ajs, self.name, "create")
            done(stream)

        def propose_from(k: int) -> None:
            if k == len(ops):
                opened()
                return

            def committed(ok: bool) -> None:
                if not ok:
                    ajs.restored_stores.pop(self.name, None)
                    failed(ApplianceError("meta proposal was not committed"))
                    return
                propose_from(k + 1)

            try:
                ajs.service.meta.propose(ops[k], committed)
            except (NotLeader, LimitExceeded, PlacementError) as exc:
                ajs.restored_stores.pop(self.name, None)
                failed(ApplianceError(f"meta proposal was not accepted: {exc}"))

        propose_from(0)

    def _last_ts_ns(self, store: store_api.StreamStore) -> int:
        """The backup's last_ts (the time of its last message, kept when that one was deleted)."""
        assert self.state is not None
        text = self.state.get("last_ts")
        if isinstance(text, str) and text and not text.startswith("0001-01-01"):
            try:
                return max(parse_rfc3339(text), store.state().last_ts_ns)
            except ValueError:
                pass
        return store.state().last_ts_ns

    def _fail(self, reply: str, exc: Exception) -> None:
        if exc is not self.failure:
            logger.warning("Restore failed for stream '%s > %s': %s", self.ajs.account.name, self.name, exc)
        self._close()
        self._advise_complete()
        error = _restore_failed(exc)
        body = {"type": TYPE_PREFIX + "stream_create_response", "error": error.as_json()}
        self.ajs.api_errors += 1
        self.ajs.send(reply, go_json(body))

    def _advise_complete(self) -> None:
        fields = {
            "start": rfc3339(self.started_ns),
            "end": rfc3339(self.ajs.now_ns()),
            "bytes": self.bytes,
            "client": self.client,
        }
        advise(self.ajs, "RESTORE_COMPLETE", "restore_complete", self.name, fields)

    def abandon(self, why: str) -> None:
        logger.warning("restore for stream '%s > %s' %s", self.ajs.account.name, self.name, why)
        self._close()

    def _stalled(self) -> None:
        self._timer = None
        if not self.done:
            self.abandon("is stalled")

    def _close(self) -> None:
        self.done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.ajs.client.unsubscribe(self._sub)
        self.ajs.restoring.pop(self.name, None)
        self._discard()

    def _discard(self) -> None:
        """Drop what was restored so far (the store and its directory)."""
        if self.store is not None:
            self.store.close()
            self.store = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def restore_dir(root: str, account: str) -> str:
    return os.path.join(root, account, "_restore")


def remove_leftovers(root: str, account: str) -> None:
    """Restores cut short by a crash or kill leave their work directories: nothing in them was
    ever a stream, so they go at start."""
    shutil.rmtree(restore_dir(root, account), ignore_errors=True)


def seed_state(state: dict[str, object]) -> str:
    """nats-server's ConsumerState JSON as the consumer's own state snapshot (consumer_state.py)."""
    delivered = state.get("delivered") or {}
    floor = state.get("ack_floor") or {}
    pending = state.get("pending") or {}
    redelivered = state.get("redelivered") or {}
    if not all(isinstance(v, dict) for v in (delivered, floor, pending, redelivered)):
        raise ApplianceError("consumer state is malformed")
    assert isinstance(delivered, dict) and isinstance(floor, dict)
    assert isinstance(pending, dict) and isinstance(redelivered, dict)
    rows = []
    for sseq, entry in pending.items():
        if not isinstance(entry, dict):
            raise ApplianceError("consumer pending state is malformed")
        rows.append([_uint(sseq, "pending"), _uint(entry.get("Sequence", 0), "pending"), _int(entry.get("Timestamp", 0))])
    snapshot = {
        "dc": _uint(delivered.get("consumer_seq", 0), "delivered"),
        "ds": _uint(delivered.get("stream_seq", 0), "delivered"),
        "dt": 0,
        "fc": _uint(floor.get("consumer_seq", 0), "ack_floor"),
        "fs": _uint(floor.get("stream_seq", 0), "ack_floor"),
        "ft": 0,
        "p": sorted(rows),
        # nats-server's redelivered counts redeliveries; appliance keeps the delivery count
        "r": sorted([_uint(s, "redelivered"), _uint(n, "redelivered") + 1] for s, n in redelivered.items()),
        "h": [],
    }
    return json.dumps(snapshot, separators=(",", ":"))


def _uint(value: object, what: str) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise ApplianceError(f"{what}: not a number") from None
    if number < 0 or number >= SEQ_LIMIT:
        raise ApplianceError(f"{what}: out of range")
    return number


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise ApplianceError("not a number") from None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
