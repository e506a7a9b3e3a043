"""Routing across accounts: stream and service imports, as nats-server's accounts.go and client.go do it.

Theory of operation.

Stream imports (B imports stream `foo.>` of A, prefix `p`): a subscription in B whose subject meets
the import's subject in B (`p.foo.>`) gets a *shadow subscription* in A, on the matching subject of
A's space (`foo.x` for `p.foo.x`; nats-server's addShadowSubscriptions). The shadow's subscriber is a
`ShadowDelivery` that hands each message to the B subscription under the mapped subject. Because the
shadow is an ordinary subscription of A, its interest goes where A's interest goes — to the sibling
workers and over the routes — so a publisher in A on another worker or server reaches the B
subscriber without anything else knowing about imports (nats-server's routes carry it the same way).

Service imports (B imports service `req.>` of A, to `local.>`): an import subscription in B on the
import subject (`local.>`), local to this worker: it is never told to siblings or routes, and
messages that arrive from them never reach it (its subscriber says `is_link`/`is_route`, which the
link and route deliveries skip), so a request is handled once, on the worker where it was published
— nats-server's processServiceImport ignores routed requests too. The request goes into A on the
export subject with a `Nats-Request-Info` header and, when it has a reply, a response subject
`_R_.<prefix>.<token>` (one prefix per exporting account and worker, a wildcard subscription
`_R_.<prefix>.>` in A that siblings and routes learn like any other). Answers published there are
routed back into B on the original reply: a singleton response ends the mapping, a streamed or
chunked one ends on an empty message or when the export's response threshold (2 min by default)
passes; the map is bounded (SERVICE_RESPONSES_MAX, oldest dropped first). A request nobody in A
received gets the no-responders status if its client asked for it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appliance import limits
from appliance.config.convert import Problems
from appliance.config.imports import Export, Import, ImportsExports, find_export, resolve
from appliance.config.options import ServerOptions
from appliance.config.subject_map import FWC, PWC, SubjectMap, has_wildcard, is_subset, tokens
from appliance.server.accounts import Account
from appliance.server.internal import InternalClient
from appliance.server.router import route
from appliance.server.sublist import Subscription

if TYPE_CHECKING:
    from appliance.server.server import Server

logger = logging.getLogger(__name__)

RESPONSE_PREFIX = b"_R_."
_DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
REQUEST_INFO = b"Nats-Request-Info"


# --- stream imports ------------------------------------------------------------------------------

class StreamRule:
    """One stream import: messages of `exporter` on `src` reach `importer` on `dest`."""

    __slots__ = ("exporter", "importer", "src", "dest", "use_pub", "forward", "backward")

    def __init__(self, importer: str, im: Import) -> None:
        self.importer = importer
        self.exporter = im.account
        self.src = im.subject.encode()
        self.dest = im.local.encode()
        self.use_pub = self.src == self.dest
        wild = has_wildcard(self.src)
        self.forward = SubjectMap(self.src, self.dest) if wild and not self.use_pub else None
        self.backward = self.forward.reverse() if self.forward is not None else None

    def to_importer(self, subject: bytes) -> bytes:
        if self.forward is not None:
            return self.forward.apply(subject)
        return subject if self.use_pub else self.dest

    def shadow_subject(self, subject: bytes) -> bytes | None:
        """The subject of A's space to subscribe for a B subscription on `subject`, or None."""
        if subject == self.dest:
            return self.src
        if is_subset(subject, self.dest):
            return self._back(subject)
        if has_wildcard(subject):
            if is_subset(self.dest, subject):
                return self.src
            overlap = _overlap(subject, self.dest)
            if overlap is not None and is_subset(overlap, self.dest):
                return self._back(overlap)
        return None

    def _back(self, subject: bytes) -> bytes:
        if self.backward is not None:
            return self.backward.apply(subject)
        return subject if self.use_pub else self.src


def _overlap(a: bytes, b: bytes) -> bytes | None:
    """The subjects both patterns match, as one pattern (None when they are disjoint)."""
    x, y = tokens(a), tokens(b)
    out: list[bytes] = []
    for i in range(max(len(x), len(y))):
        s = x[i] if i < len(x) else None
        t = y[i] if i < len(y) else None
        if s == FWC:
            out.extend(y[i:])
            return b".".join(out)
        if t == FWC:
            out.extend(x[i:])
            return b".".join(out)
        if s is None or t is None:
            return None
        if s == PWC:
            out.append(t)
        elif t == PWC or s == t:
            out.append(s)
        else:
            return None
    return b".".join(out)


class ShadowDelivery:
    """The subscriber of a shadow subscription in the exporting account: a B subscription seen from A."""

    is_link = False
    is_route = False
    __slots__ = ("conn", "sub", "rule", "cid")

    def __init__(self, conn: Any, sub: Subscription, rule: StreamRule) -> None:
        self.conn = conn
        self.sub = sub
        self.rule = rule
        self.cid = getattr(conn, "cid", 0)

    def deliver(self, shadow: Subscription, subject: bytes, reply: bytes | None, header: bytes | None,
                data: bytes) -> None:
        self.conn.deliver(self.sub, self.rule.to_importer(subject), reply, header, data)


# --- service imports -----------------------------------------------------------------------------

class ServiceRule:
    """One service import: requests of `importer` on `local` go to `exporter` on `remote`."""

    __slots__ = ("importer", "exporter", "local", "remote", "use_pub", "forward", "export", "share")

    def __init__(self, importer: str, im: Import, export: Export | None) -> None:
        self.importer = importer
        self.exporter = im.account
        self.local = im.local.encode()
        self.remote = im.subject.encode()
        self.use_pub = has_wildcard(self.remote) and self.remote == self.local
        self.forward = SubjectMap(self.local, self.remote) if has_wildcard(self.remote) and not self.use_pub else None
        self.export = export
        self.share = im.share

    def to_exporter(self, subject: bytes) -> bytes:
        if self.forward is not None:
            return self.forward.apply(subject)
        return subject if self.use_pub else self.remote

    @property
    def response_type(self) -> str:
        return self.export.response_type if self.export is not None else "Singleton"

    @property
    def threshold_s(self) -> float:
        return self.export.response_threshold_s if self.export is not None else 120.0


class ServiceImportSubscriber:
    """The subscriber of an import subscription in B: local publishes only. `is_link`/`is_route` keep its
    interest off the links and routes and route deliveries away; a message a sibling worker delivers
    (it crossed for another subscriber here) is told by the producer being that link, and ignored."""

    is_link = True
    is_route = True
    __slots__ = ("imports", "rule", "cid")

    def __init__(self, imports: AccountImports, rule: ServiceRule) -> None:
        self.imports = imports
        self.rule = rule
        self.cid = 0

    def deliver(self, sub: Subscription, subject: bytes, reply: bytes | None, header: bytes | None,
                data: bytes) -> None:
        producer = self.imports.server.producer
        if producer is not None and getattr(producer, "is_link", False):
            return  # published on another worker or server: it handled the import there
        self.imports.request(self.rule, subject, reply, header, data)


@dataclass(slots=True)
class PendingResponse:
    importer: Account
    reply: bytes
    rule: ServiceRule
    at_s: float


class ResponsePrefix:
    """The `_R_.<prefix>.>` wildcard subscription of one exporting account on this worker."""

    def __init__(self, imports: AccountImports, account: Account, prefix: bytes) -> None:
        self.prefix = prefix
        self.account = account
        self.client = InternalClient(imports.server, account, f"service import responses of {account.name}")
        self.client.subscribe(prefix + b">", imports.response)

    def close(self) -> None:
        self.client.close()


# --- the whole of one worker ---------------------------------------------------------------------

class AccountImports:
    """Stream and service imports of every account on one worker (rebuilt on a config reload)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.stream_rules: dict[str, list[StreamRule]] = {}  # importer -> its stream imports
        self.service_rules: list[ServiceRule] = []
        self.shadows: dict[Subscription, list[tuple[Account, Subscription]]] = {}
        self._import_subs: list[tuple[Account, Subscription]] = []
        self._prefixes: dict[str, ResponsePrefix] = {}  # exporter name -> its response wildcard
        self.responses: dict[bytes, PendingResponse] = {}
        self._depth = 0  # service imports chained inside one delivery
        self._sweep: Any = None
        self.configured: dict[str, ImportsExports] = {}
        self.accepted: dict[str, list[Import]] = {}
        server.interest_listeners.append(self.on_interest)

    # --- building --------------------------------------------------------------------------------

    def configure(self, accounts: dict[str, ImportsExports]) -> None:
        """(Re)build every import from the accounts' exports and imports (checked again: a reload's
        refused import is left out, as nats-server leaves it out)."""
        self._clear()
        self.configured = accounts
        accepted = self.accepted = resolve(accounts, Problems(), None)
        for importer, imports in accepted.items():
            for im in imports:
                if im.service:
                    export = find_export(accounts[im.account], im.subject, service=True)
                    self.service_rules.append(ServiceRule(importer, im, export))
                else:
                    self.stream_rules.setdefault(importer, []).append(StreamRule(importer, im))
        for rule in self.service_rules:
            account = self.server.accounts.known(rule.importer)
            if account is None:
                continue
            sub = Subscription(ServiceImportSubscriber(self, rule), rule.local, None, b"si", account.name)
            account.sublist.insert(sub)
            self._import_subs.append((account, sub))
        if self.stream_rules:
            for account in self.server.accounts.all():
                for sub in account.sublist.all_subscriptions():
                    if _is_local(sub):
                        self._add_shadows(account, sub)

    def configure_from_options(self, options: ServerOptions) -> None:
        self.configure({name: ImportsExports(list(a.exports), list(a.imports)) for name, a in options.accounts.items()})

    def _clear(self) -> None:
        """Drop the rules, shadows and import subscriptions; answers already on their way keep their
        mappings (a reload or a new account JWT does not cut pending requests off), unless their
        exporter's or importer's account is gone."""
        for sub in list(self.shadows):
            self._remove_shadows(sub)
        for account, sub in self._import_subs:
            account.sublist.remove(sub)
        self._import_subs.clear()
        self.stream_rules.clear()
        self.service_rules.clear()
        known = self.server.accounts.known
        for name, prefix in list(self._prefixes.items()):
            if known(name) is not prefix.account:
                prefix.close()
                del self._prefixes[name]
        for subject in [s for s, p in self.responses.items() if known(p.importer.name) is not p.importer]:
            del self.responses[subject]

    def close(self) -> None:
        self._clear()
        for prefix in self._prefixes.values():
            prefix.close()
        self._prefixes.clear()
        self.responses.clear()
        if self.on_interest in self.server.interest_listeners:
            self.server.interest_listeners.remove(self.on_interest)
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    # --- stream imports: shadow subscriptions ---------------------------------------------------

    def on_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        if not _is_local(sub) or account.name not in self.stream_rules:
            return
        if added:
            self._add_shadows(account, sub)
        else:
            self._remove_shadows(sub)

    def _add_shadows(self, account: Account, sub: Subscription) -> None:
        rules = self.stream_rules.get(account.name)
        if not rules or sub in self.shadows:
            return
        made: list[tuple[Account, Subscription]] = []
        for rule in rules:
            subject = rule.shadow_subject(sub.subject)
            exporter = self.server.accounts.known(rule.exporter)
            if subject is None or exporter is None:
                continue
            shadow = Subscription(ShadowDelivery(sub.conn, sub, rule), subject, sub.queue, sub.sid, exporter.name)
            exporter.sublist.insert(shadow)
            made.append((exporter, shadow))
        if made:
            self.shadows[sub] = made
            for exporter, shadow in made:
                self.server.on_interest_change(exporter, shadow, added=True)

    def _remove_shadows(self, sub: Subscription) -> None:
        for exporter, shadow in self.shadows.pop(sub, ()):
            if exporter.sublist.remove(shadow):
                self.server.on_interest_change(exporter, shadow, added=False)

    # --- service imports: requests and responses -------------------------------------------------

    def request(self, rule: ServiceRule, subject: bytes, reply: bytes | None, header: bytes | None,
                data: bytes) -> None:
        server = self.server
        exporter = server.accounts.known(rule.exporter)
        importer = server.accounts.known(rule.importer)
        if exporter is None or importer is None or self._depth >= limits.SERVICE_IMPORT_CHAIN_MAX:
            return
        to = rule.to_exporter(subject)
        response = None
        if reply is not None:
            response = self._new_response(exporter, importer, reply, rule)
        producer = server.producer
        header, data = _with_request_info(header, data, _info_for(header, importer.name, producer, self._depth > 0))
        self._depth += 1
        try:
            delivered = route(exporter, to, response, header, data, origin=self, echo=True, rng=server.rng)
        finally:
            self._depth -= 1
        if delivered:
            return
        if response is not None:
            self.responses.pop(response, None)
        if reply is not None and producer is not None and getattr(producer, "no_responders", False) \
                and getattr(producer, "account", None) is importer:
            producer.send_no_responders(subject, reply)

    def _new_response(self, exporter: Account, importer: Account, reply: bytes, rule: ServiceRule) -> bytes:
        prefix = self._prefixes.get(exporter.name)
        if prefix is None or prefix.account is not exporter:
            prefix = self._prefixes[exporter.name] = ResponsePrefix(
                self, exporter, RESPONSE_PREFIX + self._random(6) + b".")
        subject = prefix.prefix + self._random(6)
        responses = self.responses
        while len(responses) >= limits.SERVICE_RESPONSES_MAX:
            del responses[next(iter(responses))]
        responses[subject] = PendingResponse(importer, reply, rule, self.server.clock.monotonic())
        self._arm_sweep()
        return subject

    def _random(self, size: int) -> bytes:
        rng = self.server.rng
        return bytes(_DIGITS[rng.randrange(62)] for _ in range(size))

    def response(self, subject: bytes, reply: bytes | None, header: bytes | None, data: bytes) -> None:
        pending = self.responses.get(subject)
        if pending is None:
            return
        importer = pending.importer
        if self.server.accounts.known(importer.name) is not importer:
            self.responses.pop(subject, None)
            return
        delivered = route(importer, pending.reply, None, header, data, origin=self, echo=True, rng=self.server.rng)
        self.server.schedule_flush()
        ended = not data  # an empty message ends a streamed or chunked response
        if not delivered or ended or pending.rule.response_type == "Singleton":
            self.responses.pop(subject, None)
        else:
            pending.at_s = self.server.clock.monotonic()

    def _arm_sweep(self) -> None:
        if self._sweep is None:
            self._sweep = self.server.loop.call_later(limits.SERVICE_RESPONSES_SWEEP_S, self._sweep_responses)

    def _sweep_responses(self) -> None:
        """Drop the mappings whose responder did not answer within the export's response threshold."""
        self._sweep = None
        now = self.server.clock.monotonic()
        for subject in [s for s, p in self.responses.items() if now - p.at_s > p.rule.threshold_s]:
            del self.responses[subject]
        if self.responses:
            self._arm_sweep()

    # --- what monitoring shows -------------------------------------------------------------------

    def exports_of(self, account: str) -> tuple[Export, ...]:
        configured = self.configured.get(account)
        return tuple(configured.exports) if configured is not None else ()

    def import_subscriptions(self, account: str) -> int:
        """The service-import subscriptions this worker holds in `account` (every worker holds them)."""
        return sum(1 for held, _ in self._import_subs if held.name == account)

    def imports_of(self, account: str) -> tuple[Import, ...]:
        return tuple(self.accepted.get(account, ()))

    def response_prefix(self, account: str) -> bytes | None:
        prefix = self._prefixes.get(account)
        return prefix.prefix if prefix is not None else None


def _is_local(sub: Subscription) -> bool:
    """A subscription of a client or an internal client here (not a sibling's, a route's or our own)."""
    conn = sub.conn
    return not getattr(conn, "is_link", False) and not isinstance(conn, ShadowDelivery)


def _request_info(header: bytes | None) -> dict[str, object] | None:
    """The `Nats-Request-Info` of a request's header block, when it has one that parses."""
    if header is None:
        return None
    for line in header.split(b"\r\n")[1:]:
        if line.startswith(REQUEST_INFO + b":"):
            try:
                info = json.loads(line[len(REQUEST_INFO) + 1:])
            except ValueError:
                return None
            return info if isinstance(info, dict) else None
    return None


def _info_for(header: bytes | None, account: str, producer: Any, chained: bool) -> dict[str, object]:
    """nats-server's ClientInfo for a service import: the requester's account and RTT; a request already
    passed on by a service import keeps its first requester and names this hop's account as `svc`."""
    prior = _request_info(header) if chained else None
    if prior is not None:
        info: dict[str, object] = {"acc": prior.get("acc", ""), "svc": account}
        info.update((k, v) for k, v in prior.items() if k not in ("acc", "svc"))
        return info
    info = {"acc": account}
    rtt_s = getattr(producer, "rtt_s", 0.0)
    if rtt_s:
        info["rtt"] = int(rtt_s * 1e9)
    return info


def _with_request_info(header: bytes | None, data: bytes, info: dict[str, object]) -> tuple[bytes, bytes]:
    """The request with `Nats-Request-Info: <info>` (replacing one it carried)."""
    line = REQUEST_INFO + b": " + json.dumps(info, separators=(",", ":")).encode()
    if header is None:
        block = b"NATS/1.0\r\n" + line + b"\r\n\r\n"
        return block, block + data
    payload = data[len(header):]
    lines = [kept for kept in header[:-4].split(b"\r\n") if not kept.startswith(REQUEST_INFO + b":")]
    block = b"\r\n".join([*lines, line]) + b"\r\n\r\n"
    return block, block + payload
