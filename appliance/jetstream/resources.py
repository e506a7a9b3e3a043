"""Account and server resource limits, enforced as nats-server 2.15.1 enforces them.

Limits come from the config: per account `jetstream { max_mem, max_file, max_streams,
max_consumers, max_ack_pending, max_bytes_required, mem_max_stream_bytes, disk_max_stream_bytes }`
and per server `jetstream { max_memory_store, max_file_store }`. They are checked

* on STREAM.CREATE / UPDATE: bytes a stream reserves (`max_bytes`, or 1 byte when unlimited) on
  top of what the account and the server have reserved already (jetstream.go checkBytesLimits),
  the number of streams, `max_bytes_required`, a max_bytes above the account's per-stream
  maximum, and a stream max_consumers above the account's;
* on CONSUMER.CREATE: consumers per stream (the smaller of the stream's and the account's
  limit), and max_ack_pending (the default is clamped to the account limit, an explicit value
  above it is refused);
* on publish, through a guard a stream carries only when a limit applies to its storage type:
  the account's usage plus the message over the account limit refuses it with 10002, the
  server's usage already over the server limit with 10023.

The server limits nats-server derives when none is configured (75% of RAM, 75% of free disk)
are used for reservations on the API path; the publish guard applies configured server limits
only, so a stream with no configured limit keeps its unguarded publish path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from appliance.config.options import AccountJetStreamLimits
from appliance.jetstream import errors
from appliance.jetstream.config import DEFAULT_MAX_ACK_PENDING, ConsumerConfig, StreamConfig
from appliance.jetstream.storeview import stored_bytes
from appliance.jetstream.stream import Outcome

if TYPE_CHECKING:
    from appliance.jetstream import ops
    from appliance.jetstream.service import AccountJetStream, JetStreamService
    from appliance.jetstream.stream import Stream

MEMORY_SHARE = 0.75  # nats-server's default max_memory_store: 75% of RAM
STORAGE_SHARE = 0.75  # and max_file_store: 75% of the store's free disk
UNLIMITED = AccountJetStreamLimits(enabled=True)


@dataclass(frozen=True, slots=True)
class Usage:
    memory: int = 0
    storage: int = 0
    reserved_memory: int = 0
    reserved_storage: int = 0

    def used(self, storage: str) -> int:
        return self.memory if storage == "memory" else self.storage

    def reserved(self, storage: str) -> int:
        return self.reserved_memory if storage == "memory" else self.reserved_storage


def account_limits(ajs: AccountJetStream) -> AccountJetStreamLimits:
    configured = ajs.service.options.accounts.get(ajs.account.name)
    return configured.jetstream if configured is not None else UNLIMITED


def server_limits(service: JetStreamService) -> tuple[int, int]:
    """(max_memory, max_storage) of this server: configured, or derived as nats-server does."""
    options = service.options.jetstream
    memory = options.max_memory
    if memory < 0:
        memory = int(psutil.virtual_memory().total * MEMORY_SHARE)
    storage = options.max_storage
    if storage < 0:
        root = service.root if os.path.isdir(service.root) else "/"
        storage = int(psutil.disk_usage(root).free * STORAGE_SHARE)
    return memory, storage


def usage_of(streams: Sequence[Stream]) -> Usage:
    memory = storage = reserved_memory = reserved_storage = 0
    for stream in streams:
        size = stored_bytes(stream.store)
        reserve = max(stream.config.max_bytes, 0)
        if stream.config.storage == "memory":
            memory += size
            reserved_memory += reserve
        else:
            storage += size
            reserved_storage += reserve
    return Usage(memory, storage, reserved_memory, reserved_storage)


def account_usage(ajs: AccountJetStream) -> Usage:
    return usage_of(list(ajs.streams.values()))


def server_usage(service: JetStreamService) -> Usage:
    return usage_of([s for ajs in service.accounts.values() for s in ajs.streams.values()])


def limits_json(ajs: AccountJetStream) -> dict[str, object]:
    """The `limits` object of $JS.API.INFO, as nats-server reports an untiered account."""
    lim = account_limits(ajs)
    return {
        "max_memory": lim.max_memory,
        "max_storage": lim.max_store,
        "max_streams": lim.max_streams,
        "max_consumers": lim.max_consumers,
        "max_ack_pending": lim.max_ack_pending,
        "memory_max_stream_bytes": lim.memory_max_stream_bytes,
        "storage_max_stream_bytes": lim.storage_max_stream_bytes,
        "max_bytes_required": lim.max_bytes_required,
    }


UINT64_MAX = 2**64 - 1


def account_reserved_json(ajs: AccountJetStream) -> dict[str, object]:
    """/jsz account_details reserved_memory/storage: nats-server shows the account's limits there,
    an unlimited one (-1) as Go's uint64 of it."""
    lim = account_limits(ajs)
    return {
        "reserved_memory": lim.max_memory if lim.max_memory >= 0 else UINT64_MAX,
        "reserved_storage": lim.max_store if lim.max_store >= 0 else UINT64_MAX,
    }


# --- the API path ------------------------------------------------------------------------------


def check_stream_create(ajs: AccountJetStream, config: StreamConfig) -> None:
    lim = account_limits(ajs)
    if lim.max_bytes_required and config.max_bytes <= 0:
        raise errors.STREAM_MAX_BYTES_REQUIRED.error()
    if lim.max_streams > 0 and len(ajs.streams) >= lim.max_streams:
        raise errors.MAXIMUM_STREAMS_LIMIT.error()
    _check_bytes(ajs, config, config.max_bytes)


def check_stream_update(ajs: AccountJetStream, old: StreamConfig, new: StreamConfig) -> None:
    """Only the growth of max_bytes is reserved again (nats-server's maxBytesDiff)."""
    if account_limits(ajs).max_bytes_required and new.max_bytes <= 0:
        raise errors.STREAM_MAX_BYTES_REQUIRED.error()
    _check_bytes(ajs, new, max(new.max_bytes - old.max_bytes, 0))


def _check_bytes(ajs: AccountJetStream, config: StreamConfig, add: int) -> None:
    lim = account_limits(ajs)
    if 0 < lim.max_consumers < config.max_consumers:
        raise errors.MAXIMUM_CONSUMERS_LIMIT.error()
    stream_max = lim.memory_max_stream_bytes if config.storage == "memory" else lim.storage_max_stream_bytes
    if 0 < stream_max < config.max_bytes:
        raise errors.STREAM_MAX_STREAM_BYTES_EXCEEDED.error()
    add = 1 if add < 0 else add
    memory = config.storage == "memory"
    exceeded = errors.MEMORY_RESOURCES_EXCEEDED if memory else errors.STORAGE_RESOURCES_EXCEEDED
    account_max = lim.max_memory if memory else lim.max_store
    mine = account_usage(ajs).reserved(config.storage)
    if account_max >= 0 and mine + add > account_max:
        raise exceeded.error()
    server_memory, server_storage = server_limits(ajs.service)
    server_max = server_memory if memory else server_storage
    if server_usage(ajs.service).reserved(config.storage) + add > server_max:
        raise exceeded.error()


def check_consumer(
    ajs: AccountJetStream, stream: Stream, config: ConsumerConfig, requested: object, *, new: bool
) -> None:
    """Account limits of a consumer create; clamps a defaulted max_ack_pending to the account's."""
    lim = account_limits(ajs)
    limit = lim.max_ack_pending
    if limit > 0 and config.ack_policy != "none":
        if not requested and config.max_ack_pending == DEFAULT_MAX_ACK_PENDING:
            config.max_ack_pending = min(config.max_ack_pending, limit)
        if config.max_ack_pending > limit:
            raise errors.CONSUMER_MAX_PENDING_ACK_EXCESS.format(limit=limit)
    if not new or lim.max_consumers <= 0:
        return
    cap = stream.config.max_consumers
    if cap <= 0 or lim.max_consumers < cap:
        cap = lim.max_consumers
    if len(stream.consumers) >= cap:
        raise errors.MAXIMUM_CONSUMERS_LIMIT.error()


# --- the publish path -------------------------------------------------------------------------


class PublishGuard:
    """Installed on a stream only when a limit applies to its storage type. A batch that fits
    whole (usage plus every message's size) goes the stream's usual way (None); otherwise each
    message is checked: one that would take the account over its limit is refused (10002), one
    arriving while the server is over its configured limit too (10023), the rest are applied
    one by one."""

    def __init__(self, ajs: AccountJetStream, account_max: int, server_max: int) -> None:
        self.ajs = ajs
        self.account_max = account_max
        self.server_max = server_max

    def __call__(self, stream: Stream, msgs: list[ops.InMsg]) -> list[Outcome] | None:
        storage = stream.config.storage
        others = [s for s in self.ajs.streams.values() if s is not stream]
        account_others = usage_of(others).used(storage)
        server_others = 0
        if self.server_max >= 0:
            everything = [s for a in self.ajs.service.accounts.values() for s in a.streams.values()]
            server_others = usage_of([s for s in everything if s is not stream]).used(storage)
        size_of = stream.store.msg_size
        batch = sum(size_of(m.subject, m.header, m.payload) for m in msgs)
        after = stored_bytes(stream.store) + batch
        if (self.server_max < 0 or server_others + after <= self.server_max) and (
            self.account_max < 0 or account_others + after <= self.account_max
        ):
            return None
        outcomes: list[Outcome] = []
        for msg in msgs:
            mine = stored_bytes(stream.store)
            size = stream.store.msg_size(msg.subject, msg.header, msg.payload)
            if 0 <= self.server_max < server_others + mine:
                outcomes.append(Outcome(error=errors.INSUFFICIENT_RESOURCES.error()))
            elif 0 <= self.account_max < account_others + mine + size:
                outcomes.append(Outcome(error=errors.ACCOUNT_RESOURCES_EXCEEDED.error()))
            else:
                outcomes.append(stream.apply_checked(msg))
        return outcomes


def attach_guard(ajs: AccountJetStream, stream: Stream) -> None:
    """Give the stream a publish guard when a limit applies to it, none otherwise."""
    lim = account_limits(ajs)
    options = ajs.service.options.jetstream
    memory = stream.config.storage == "memory"
    account_max = lim.max_memory if memory else lim.max_store
    server_max = options.max_memory if memory else options.max_storage
    stream.guard = PublishGuard(ajs, account_max, server_max) if account_max >= 0 or server_max >= 0 else None
