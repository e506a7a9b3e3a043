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
* on publish, through the guard every stream carries: the account's usage plus the message
  over the account limit refuses it with 10002, the server's usage already over the server
  limit with 10023 — the configured one, or the one nats-server derives when none is
  configured (75% of RAM, 75% of the store's free disk, taken when the stream opens).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from appliance.config.options import AccountJetStreamLimits, ServerOptions
from appliance.jetstream import errors
from appliance.jetstream.catalog import catalog
from appliance.jetstream.config import DEFAULT_MAX_ACK_PENDING, ConsumerConfig, StreamConfig
from appliance.jetstream.storeview import stored_bytes
from appliance.jetstream.stream import Outcome

if TYPE_CHECKING:
    from appliance.jetstream import ops
    from appliance.jetstream.service import AccountJetStream, JetStreamService
    from appliance.jetstream.stream import Stream
    from appliance.server.server import Server

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


def tier_name(replicas: int) -> str:
    """nats-server's tierName: limits tiers are named by replica count (R1, R3...)."""
    return f"R{max(replicas, 1)}"


def select_limits(ajs: AccountJetStream, replicas: int) -> tuple[AccountJetStreamLimits, str]:
    """nats-server's selectLimits: the account's limits and "" when untiered, else the tier of
    `replicas` (an account JWT's tiered_limits); 10120 when that tier has none."""
    lim = account_limits(ajs)
    if not lim.tiers:
        return lim, ""
    tier = tier_name(replicas)
    selected = lim.tiers.get(tier)
    if selected is None:
        raise errors.NO_LIMITS.error()
    return selected, tier


def tier_streams(ajs: AccountJetStream, tier: str) -> list[Stream]:
    """The account's streams that count against `tier` (every one when untiered)."""
    streams = list(ajs.streams.values())
    return streams if not tier else [s for s in streams if tier_name(s.config.num_replicas) == tier]


def server_limits(service: JetStreamService) -> tuple[int, int]:
    """(max_memory, max_storage) of this server: configured, or derived as nats-server does."""
    options = service.options.jetstream
    memory = options.max_memory
    if memory < 0:
        memory = psutil.virtual_memory().total // 4 * 3  # MEMORY_SHARE, in nats-server's integer steps
    storage = options.max_storage
    if storage < 0:
        root = service.root if os.path.isdir(service.root) else "/"
        storage = psutil.disk_usage(root).free // 4 * 3  # STORAGE_SHARE, as nats-server diskAvailable
    return memory, storage


def free_bytes(service: JetStreamService) -> dict[str, int]:
    """What this server can still take, as nats-server's placement reckons a peer's available
    storage: its limit less the larger of what its streams reserve (max_bytes) and use."""
    max_memory, max_storage = server_limits(service)
    usage = server_usage(service)
    return {
        "file": max(max_storage - max(usage.reserved_storage, usage.storage), 0),
        "memory": max(max_memory - max(usage.reserved_memory, usage.memory), 0),
    }


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


def limits_json(ajs: AccountJetStream, lim: AccountJetStreamLimits | None = None) -> dict[str, object]:
    """The `limits` object of $JS.API.INFO (of the account, or of one tier: `lim`); a tiered
    account's own is all zeros, as nats-server's empty JetStreamAccountLimits."""
    if lim is None:
        lim = account_limits(ajs)
        if lim.tiers:
            lim = AccountJetStreamLimits(enabled=True, max_memory=0, max_store=0, max_streams=0, max_consumers=0,
                                         max_ack_pending=0, memory_max_stream_bytes=0, storage_max_stream_bytes=0)
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


def tiers_json(ajs: AccountJetStream, configs: Sequence[StreamConfig]) -> dict[str, object] | None:
    """The `tiers` object of $JS.API.INFO for a tiered account (None when untiered): every tier with
    limits, and any other a stream is in, with its streams (`configs`: the account's catalog) and
    the usage, reservations and consumers of the streams held here."""
    tiers = account_limits(ajs).tiers
    if not tiers:
        return None
    zero = AccountJetStreamLimits(enabled=True, max_memory=0, max_store=0, max_streams=0, max_consumers=0,
                                  max_ack_pending=0, memory_max_stream_bytes=0, storage_max_stream_bytes=0)
    names = sorted({*tiers, *(tier_name(c.num_replicas) for c in configs)})
    out: dict[str, object] = {}
    for name in names:
        held = tier_streams(ajs, name)
        usage = usage_of(held)
        out[name] = {
            "memory": usage.memory, "storage": usage.storage,
            "reserved_memory": usage.reserved_memory, "reserved_storage": usage.reserved_storage,
            "streams": sum(1 for c in configs if tier_name(c.num_replicas) == name),
            "consumers": sum(len(s.consumers) for s in held),
            "limits": limits_json(ajs, tiers.get(name, zero)),
        }
    return out


UINT64_MAX = 2**64 - 1


def account_reserved_json(ajs: AccountJetStream) -> dict[str, object]:
    """/jsz account_details reserved_memory/storage: nats-server shows the account's limits there,
    an unlimited one (-1) as Go's uint64 of it."""
    lim = account_limits(ajs)
    return {
        "reserved_memory": lim.max_memory if lim.max_memory >= 0 else UINT64_MAX,
        "reserved_storage": lim.max_store if lim.max_store >= 0 else UINT64_MAX,
    }


def global_account_jetstream(options: ServerOptions) -> bool:
    """Does the global account get JetStream? nats-server enables it there only when no other
    account (the system account aside) is configured (server.go globalAccountOnly)."""
    system = options.system_account or "$SYS"
    return options.jetstream.enabled and all(name in ("$G", system) for name in options.accounts)


def settle_global_account(server: Server) -> None:
    """Before JetStream starts: the global account is a JetStream one only as nats-server's is
    (its API then answers 10039 "JetStream not enabled for account", /jsz does not list it)."""
    global_account = server.accounts.get("$G")
    if global_account is not None and not global_account_jetstream(server.options):
        global_account.jetstream = False


# --- the API path ------------------------------------------------------------------------------


def tier_configs(ajs: AccountJetStream, tier: str) -> list[StreamConfig]:
    """The configs of the account's streams (clustered: wherever they are placed) in `tier`."""
    configs = list(catalog(ajs).values())
    return configs if not tier else [c for c in configs if tier_name(c.num_replicas) == tier]


def check_stream_create(ajs: AccountJetStream, config: StreamConfig) -> None:
    lim, tier = select_limits(ajs, config.num_replicas)
    if lim.max_bytes_required and config.max_bytes <= 0:
        raise errors.STREAM_MAX_BYTES_REQUIRED.error()
    if lim.max_streams > 0:  # the stream itself does not count (nats-server's countStreams)
        others = [c for c in tier_configs(ajs, tier) if c.name != config.name]
        if len(others) >= lim.max_streams:
            raise errors.MAXIMUM_STREAMS_LIMIT.error()
    _check_bytes(ajs, config, config.max_bytes, lim, tier)


def check_stream_update(ajs: AccountJetStream, old: StreamConfig, new: StreamConfig) -> None:
    """Only the growth of max_bytes is reserved again (nats-server's maxBytesDiff)."""
    lim, tier = select_limits(ajs, new.num_replicas)
    if lim.max_bytes_required and new.max_bytes <= 0:
        raise errors.STREAM_MAX_BYTES_REQUIRED.error()
    _check_bytes(ajs, new, max(new.max_bytes - old.max_bytes, 0), lim, tier)


def _check_bytes(ajs: AccountJetStream, config: StreamConfig, add: int, lim: AccountJetStreamLimits,
                 tier: str) -> None:
    if 0 < lim.max_consumers < config.max_consumers:
        raise errors.MAXIMUM_CONSUMERS_LIMIT.error()
    stream_max = lim.memory_max_stream_bytes if config.storage == "memory" else lim.storage_max_stream_bytes
    if 0 < stream_max < config.max_bytes:
        raise errors.STREAM_MAX_STREAM_BYTES_EXCEEDED.error()
    add = 1 if add < 0 else add
    memory = config.storage == "memory"
    exceeded = errors.MEMORY_RESOURCES_EXCEEDED if memory else errors.STORAGE_RESOURCES_EXCEEDED
    account_max = lim.max_memory if memory else lim.max_store
    mine = sum(max(c.max_bytes, 0) for c in tier_configs(ajs, tier) if c.storage == config.storage)
    if account_max >= 0 and mine + add > account_max:
        raise exceeded.error()
    server_memory, server_storage = server_limits(ajs.service)
    server_max = server_memory if memory else server_storage
    if server_usage(ajs.service).reserved(config.storage) + add > server_max:
        raise exceeded.error()


def check_consumer(
    ajs: AccountJetStream, stream: Stream, config: ConsumerConfig, requested: object, *, new: bool
) -> None:
    """Account limits of a consumer create (of the consumer's replica tier: its own num_replicas, or
    the stream's); clamps a defaulted max_ack_pending to the account's."""
    lim, _tier = select_limits(ajs, config.num_replicas or stream.config.num_replicas)
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

# What one message can count for at most, on top of the server's max_payload (which covers
# header and payload): its subject (a control line) and the stores' per-message overhead.
MSG_BYTES_BOUND_EXTRA = 4096 + 64


def used_bytes(streams: Sequence[Stream], storage: str) -> int:
    """Bytes stored by the streams of one storage type."""
    return sum(stored_bytes(s.store) for s in streams if s.config.storage == storage)


class PublishGuard:
    """Every stream carries one: nats-server checks each publish against the server's
    JetStream limit (configured, or derived at start: 75% of RAM / of the free disk) and, when
    one is set, the account's. A message arriving while the server's usage is already over its
    limit is refused with 10023 (nats-server's limitsExceeded: the message itself is not
    counted); one that would take the account over its limit with 10002.

    A batch that fits whole goes the stream's usual way (None). With no account limit that is
    decided without a scan of the streams or sizing each message: from the server's ServerBudget
    and a bound on the batch (messages x the largest message). Otherwise, and near the limits,
    each message is checked and applied one by one."""

    def __init__(
        self, ajs: AccountJetStream, account_max: int, server_max: int, budget: ServerBudget, tier: str = ""
    ) -> None:
        self.ajs = ajs
        # a tiered account's limit counts the streams of this stream's tier only; a tier's limit is
        # per replica (nats-server scales it by the replicas against the cluster-wide usage), so
        # this server's copies are held against it as they are
        self.tier = tier
        self.account_max = account_max
        self.server_max = server_max
        self.budget = budget
        self.msg_bytes_max = ajs.service.options.max_payload + MSG_BYTES_BOUND_EXTRA

    def _fits_budget(self, stream: Stream, count: int) -> bool:
        budget = self.budget
        bound = count * self.msg_bytes_max
        if not budget.valid or budget.scanned + budget.since + bound > self.server_max:
            everything = [s for a in self.ajs.service.accounts.values() for s in a.streams.values()]
            budget.scanned = used_bytes(everything, stream.config.storage)
            budget.since, budget.valid = 0, True
            if budget.scanned + bound > self.server_max:
                return False
        budget.since += bound
        return True

    def _server_others(self, stream: Stream) -> int:
        everything = [s for a in self.ajs.service.accounts.values() for s in a.streams.values()]
        return used_bytes([s for s in everything if s is not stream], stream.config.storage)

    def __call__(self, stream: Stream, msgs: list[ops.InMsg]) -> list[Outcome] | None:
        storage = stream.config.storage
        if self.account_max < 0 and self._fits_budget(stream, len(msgs)):
            return None
        self.budget.valid = False  # what this path lets through is not in the budget: scan next time
        server_others = self._server_others(stream)
        mine = stored_bytes(stream.store)
        account_others = 0
        if self.account_max >= 0:
            account_others = used_bytes([s for s in tier_streams(self.ajs, self.tier) if s is not stream], storage)
        size_of = stream.store.msg_size
        after = mine + sum(size_of(m.subject, m.header, m.payload) for m in msgs)
        if server_others + after <= self.server_max and (
            self.account_max < 0 or account_others + after <= self.account_max
        ):
            return None
        outcomes: list[Outcome] = []
        for msg in msgs:
            refusal = self._refusal(stream, msg, server_others, account_others)
            outcomes.append(stream.apply_checked(msg) if refusal is None else Outcome(error=refusal))
        return outcomes

    def _refusal(
        self, stream: Stream, msg: ops.InMsg, server_others: int, account_others: int, mine: int | None = None
    ) -> errors.JsApiError | None:
        if mine is None:
            mine = stored_bytes(stream.store)
        if self.server_max < server_others + mine:
            return errors.INSUFFICIENT_RESOURCES.error()
        if self.account_max >= 0:
            size = stream.store.msg_size(msg.subject, msg.header, msg.payload)
            if self.account_max < account_others + mine + size:
                return errors.ACCOUNT_RESOURCES_EXCEEDED.error()
        return None

    def refusals(
        self, stream: Stream, msgs: Sequence[ops.InMsg], pending: int
    ) -> list[errors.JsApiError | None] | None:
        """A replicated stream's leader, before it proposes: the refusal of each message (None
        when every one fits), counting `pending` bytes it accepted and has not applied yet and
        the messages of this batch let through before each. Nothing is applied here; the
        replicas store what the leader accepted without asking their own server's limits
        (which differ between servers), as nats-server checks these on the leader only."""
        if self.account_max < 0 and self._fits_budget(stream, len(msgs)):  # in-flight batches are in `since`
            return None
        self.budget.valid = False
        server_others = self._server_others(stream)
        account_others = 0
        if self.account_max >= 0:
            account_others = used_bytes([s for s in self.ajs.streams.values() if s is not stream],
                                        stream.config.storage)
        mine = stored_bytes(stream.store) + pending
        out: list[errors.JsApiError | None] = []
        for msg in msgs:
            refusal = self._refusal(stream, msg, server_others, account_others, mine)
            if refusal is None:
                mine += stream.store.msg_size(msg.subject, msg.header, msg.payload)
            out.append(refusal)
        return out if any(r is not None for r in out) else None

    def admission(self, stream: Stream) -> Callable[[ops.InMsg], errors.JsApiError | None]:
        """For writes that do not come as publishes (a mirror's): the refusal of each next
        message by the same rules, usage of the other streams taken once."""
        self.budget.valid = False  # these writes do not count in the budget: scan again next time
        server_others = self._server_others(stream)
        account_others = 0
        if self.account_max >= 0:
            others = [s for s in tier_streams(self.ajs, self.tier) if s is not stream]
            account_others = used_bytes(others, stream.config.storage)

        def refusal(msg: ops.InMsg) -> errors.JsApiError | None:
            return self._refusal(stream, msg, server_others, account_others)

        return refusal


@dataclass(slots=True)
class ServerBudget:
    """An upper bound of the server's usage of one storage type, so that publishes need not scan
    every stream: the usage the last scan found plus the most each batch let through since could
    have added. Writes that bypass the publish guard (a mirror's) invalidate it; deletes and
    purges only make it pessimistic. A batch that would not fit under it triggers a new scan."""

    scanned: int = 0
    since: int = 0
    valid: bool = False


def _budget(service: JetStreamService, storage: str) -> ServerBudget:
    """The one budget of a server and storage type, shared by its streams' guards."""
    per_storage = _budgets.get(service)
    if per_storage is None:
        per_storage = _budgets[service] = {}
    return per_storage.setdefault(storage, ServerBudget())


_budgets: weakref.WeakKeyDictionary[JetStreamService, dict[str, ServerBudget]] = weakref.WeakKeyDictionary()


def attach_guard(ajs: AccountJetStream, stream: Stream) -> None:
    """Give the stream its publish guard: the server limit always applies (nats-server derives
    one when none is configured), the account's when it has one for the stream's storage."""
    try:
        lim, tier = select_limits(ajs, stream.config.num_replicas)
    except errors.JsApiError:  # its tier went away with a new account JWT: the server's limit only
        lim, tier = UNLIMITED, ""
    server_memory, server_storage = server_limits(ajs.service)
    memory = stream.config.storage == "memory"
    account_max = lim.max_memory if memory else lim.max_store
    server_max = server_memory if memory else server_storage
    stream.guard = PublishGuard(ajs, account_max, server_max, _budget(ajs.service, stream.config.storage), tier)
