"""Account exports and imports (`accounts { A { exports: [...], imports: [...] } }`), as nats-server's
parseAccountExports / parseAccountImports and the checks its Account.add*Import* make at load.

Parsing gives typed entries per account; `resolve` then checks every import against the exporting
account in config order — exports first, since imports are checked against them — with
nats-server's error texts ("Error adding stream import "foo.>": stream import not authorized"),
each reported at the `accounts` block as nats-server reports them. Cycles are refused as
nats-server's streamImportFormsCycle / serviceImportFormsCycle find them (against the imports
accepted so far).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from appliance.config.convert import BadValue, Problems, parse_go_duration, type_name
from appliance.config.parser import ConfigMap, Position, Value
from appliance.config.subject_map import MappingError, SubjectMap, collide, has_wildcard, is_literal, is_subset, is_valid

RESPONSE_TYPES = {"single": "Singleton", "singleton": "Singleton", "stream": "Streamed", "chunk": "Chunked",
                  "chunked": "Chunked"}
DEFAULT_RESPONSE_THRESHOLD_S = 120.0  # nats-server's DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD


@dataclass(slots=True)
class Export:
    subject: str
    service: bool  # False: a stream export
    accounts: tuple[str, ...] | None = None  # None: public
    response_type: str = "Singleton"
    response_threshold_s: float = DEFAULT_RESPONSE_THRESHOLD_S
    allow_trace: bool = False
    account_token_position: int = 0
    latency: dict[str, object] | None = None
    token_required: bool = False  # an account JWT's `token_req`: importers need an activation token
    activation_issuers: tuple[str, ...] = ()  # who may sign those: the exporting account and its signing keys


@dataclass(frozen=True, slots=True)
class Activation:
    """An import's activation token (its signature verified when the account JWT was read)."""

    issuer: str
    issuer_account: str  # set when a signing key of the exporting account signed it
    grantee: str  # the importing account
    subject: str  # what it grants
    service: bool
    expires: int = 0  # unix seconds; 0: never


@dataclass(slots=True)
class Import:
    account: str
    subject: str  # the exporter's subject
    service: bool
    to: str = ""  # stream: the importer's subject ("" = prefix + subject); service: what clients publish on
    prefix: str = ""
    share: bool = False
    allow_trace: bool = False
    activation: Activation | None = None  # an account JWT import's `token`

    @property
    def local(self) -> str:
        """The importing account's subject: a stream's delivery subject, a service's request subject."""
        if self.service:
            return self.to or self.subject
        if self.prefix:
            return self.prefix.rstrip(".") + "." + self.subject
        return self.to or self.subject


@dataclass(slots=True)
class ImportsExports:
    exports: list[Export] = field(default_factory=list)
    imports: list[Import] = field(default_factory=list)


def _q(text: str) -> str:
    return json.dumps(text)


def parse_exports(value: Value, problems: Problems) -> list[Export]:
    if not isinstance(value.data, list):
        raise BadValue(value.position, f"Exports should be an array, got {type_name(value.data)}")
    exports = []
    for item in value.data:
        if not isinstance(item.data, ConfigMap):
            problems.error(item.position, f"Export Items should be a map with type entry, got {type_name(item.data)}")
            continue
        export = _parse_export(item.data, problems)
        if export is not None:
            exports.append(export)
    return exports


def _parse_export(entries: ConfigMap, problems: Problems) -> Export | None:
    kind: str | None = None
    subject = ""
    accounts: tuple[str, ...] | None = None
    response, threshold, allow_trace, position, latency = "Singleton", DEFAULT_RESPONSE_THRESHOLD_S, False, 0, None
    response_at: Position | None = None
    for entry in entries.values():
        key, data, at = entry.key.lower(), entry.value.data, entry.value.position
        if key in ("stream", "service"):
            other = "service" if key == "stream" else "stream"
            if kind == other:
                problems.error(at, f"Detected {key} {_q(str(data))} but already saw a {other}")
                continue
            if not isinstance(data, str):
                problems.error(at, f"Expected {key} name to be string, got {type_name(data)}")
                continue
            kind, subject = key, data
        elif key in ("response", "response_type"):
            if not isinstance(data, str):
                problems.error(at, f"Expected response type to be string, got {type_name(data)}")
                continue
            if data.lower() not in RESPONSE_TYPES:
                problems.error(at, f"Unknown response type: {_q(data)}")
                continue
            response, response_at = RESPONSE_TYPES[data.lower()], at
        elif key in ("threshold", "response_threshold", "response_max_time", "response_time"):
            try:
                threshold = parse_go_duration(data) if isinstance(data, str) else -1.0
                if threshold < 0:
                    raise ValueError(data)
            except ValueError:
                problems.error(at, f"Expected response threshold to be a parseable time duration, got {_q(str(data))}")
        elif key == "accounts":
            if not isinstance(data, list):
                problems.error(at, f"Expected accounts to be an array, got {type_name(data)}")
                continue
            accounts = tuple(str(v.data) for v in data)
        elif key == "latency":
            latency = {"subject": data} if isinstance(data, str) else {"raw": True}
        elif key == "account_token_position":
            position = int(data) if isinstance(data, int) else 0
        elif key == "allow_trace":
            allow_trace = bool(data)
        elif not entry.value.used_as_variable:
            problems.unknown(entry)
    if kind == "stream" and response_at is not None:
        problems.error(response_at, "Detected response directive on non-service")
    if kind is None:
        return None
    return Export(subject, kind == "service", accounts, response, threshold, allow_trace, position, latency)


def parse_imports(value: Value, problems: Problems) -> list[Import]:
    if not isinstance(value.data, list):
        raise BadValue(value.position, f"Imports should be an array, got {type_name(value.data)}")
    imports: list[Import] = []
    for item in value.data:
        if not isinstance(item.data, ConfigMap):
            problems.error(item.position, f"Import Items should be a map with type entry, got {type_name(item.data)}")
            continue
        found = _parse_import(item.data, problems)
        if found is None:
            continue
        if found.service:
            dup = next((i for i in imports if i.service and i.local == found.local and i.account == found.account), None)
            if dup is not None:
                problems.error(item.position, f"Duplicate service import subject {_q(found.local)}, previously used in "
                                              f"import for account {_q(dup.account)}, subject {_q(dup.subject)}")
                continue
        imports.append(found)
    return imports


def _parse_import(entries: ConfigMap, problems: Problems) -> Import | None:
    kind: str | None = None
    account = subject = prefix = to = ""
    share = allow_trace = False
    to_at: Position | None = None
    for entry in entries.values():
        key, data, at = entry.key.lower(), entry.value.data, entry.value.position
        if key in ("stream", "service"):
            other = "service" if key == "stream" else "stream"
            if kind == other:
                problems.error(at, f"Detected {key} but already saw a {other}")
                continue
            if not isinstance(data, ConfigMap):
                problems.error(at, f"{key.capitalize()} entry should be an account map, got {type_name(data)}")
                continue
            account, subject = "", ""
            for inner in data.values():
                name = inner.key.lower()
                if name == "account":
                    account = str(inner.value.data)
                elif name == "subject":
                    subject = str(inner.value.data)
                elif not inner.value.used_as_variable:
                    problems.unknown(inner)
            if not account or not subject:
                problems.error(at, "Expect an account name and a subject")
                continue
            kind = key
        elif key == "prefix":
            prefix = str(data)
        elif key == "to":
            to, to_at = str(data), at
        elif key == "share":
            share = bool(data)
        elif key == "allow_trace":
            allow_trace = bool(data)
        elif not entry.value.used_as_variable:
            problems.unknown(entry)
    if kind is None:
        return None
    if kind == "stream" and prefix and to:
        problems.error(to_at, "Stream import can not have a 'prefix' and a 'to' property")
        to = ""
    if kind == "service":
        return Import(account, subject, True, to=to or subject, share=share)
    return Import(account, subject, False, to=to, prefix=prefix, allow_trace=allow_trace)


# --- resolution: every import checked against its exporter ------------------------------------------

def approved(exporter: ImportsExports, importer: str, subject: str, *, service: bool,
             activation: Activation | None = None, now_s: float | None = None) -> bool:
    """nats-server's check{Stream,Service}ImportAuthorized: an export equal to `subject`, else the first
    export `subject` is a subset of; public, listing the importing account, or (`token_req`) granted by
    an activation token the exporter signed for this importer and subject."""
    if not is_valid(subject.encode()):
        return False
    exports = [e for e in exporter.exports if e.service == service]
    match = next((e for e in exports if e.subject == subject), None)
    tokens = None
    if match is None:
        match = next((e for e in exports if is_subset(subject.encode(), e.subject.encode())), None)
        tokens = subject.split(".")
    if match is None:
        return False
    if match.account_token_position > 0:
        return tokens is not None and match.account_token_position <= len(tokens) \
            and tokens[match.account_token_position - 1] == importer
    if match.token_required:
        return importer in (match.accounts or ()) or _activated(match, activation, importer, subject, service, now_s)
    return match.accounts is None or not match.accounts or importer in match.accounts


def _activated(export: Export, activation: Activation | None, importer: str, subject: str, service: bool,
               now_s: float | None) -> bool:
    if activation is None or activation.service != service or activation.grantee != importer:
        return False
    if activation.issuer not in export.activation_issuers:
        return False
    if activation.issuer_account and activation.issuer_account not in export.activation_issuers:
        return False
    if activation.expires and activation.expires <= (time.time() if now_s is None else now_s):
        return False
    return activation.subject == subject or is_subset(subject.encode(), activation.subject.encode())


def find_export(exporter: ImportsExports, subject: str, *, service: bool) -> Export | None:
    """The export a (service) subject falls under: exact first, then the first wildcard export covering it."""
    exports = [e for e in exporter.exports if e.service == service]
    exact = next((e for e in exports if e.subject == subject), None)
    if exact is not None:
        return exact
    return next((e for e in exports if is_subset(subject.encode(), e.subject.encode())), None)


def _stream_cycle(accounts: dict[str, ImportsExports], accepted: dict[str, list[Import]], at: str, to: str,
                  visited: set[str]) -> bool:
    here = accounts.get(at)
    if here is None or not any(not e.service and is_subset(to.encode(), e.subject.encode()) for e in here.exports):
        return False
    for im in accepted.get(at, []):
        if im.service or not collide(to.encode(), im.local.encode()):
            continue
        if im.account in visited:
            return True
        visited.add(at)
        narrowed = im.local if is_subset(im.local.encode(), to.encode()) else to
        if _stream_cycle(accounts, accepted, im.account, narrowed, visited):
            return True
    return False


def _service_cycle(accepted: dict[str, list[Import]], at: str, subject: str, visited: set[str]) -> bool:
    for im in accepted.get(at, []):
        if not im.service or not collide(subject.encode(), im.local.encode()):
            continue
        if im.account in visited:
            return True
        visited.add(at)
        narrowed = im.local if is_subset(im.local.encode(), subject.encode()) else subject
        if _service_cycle(accepted, im.account, narrowed, visited):
            return True
    return False


def resolve(accounts: dict[str, ImportsExports], problems: Problems, position: Position | None) -> dict[str, list[Import]]:
    """The imports that stand, per importing account; every refused one is an error at `position`."""
    accepted: dict[str, list[Import]] = {}
    for name, account in accounts.items():
        for export in account.exports:
            kind = "service" if export.service else "stream"
            for other in export.accounts or ():
                if other not in accounts:
                    problems.error(position, f"{_q(other)} account not defined for {kind} export")
    for service in (False, True):  # every stream import first, then the services (nats-server's order)
        for name, account in accounts.items():
            for im in account.imports:
                if im.service != service:
                    continue
                error = check_import(accounts, accepted, name, im)
                if error is not None:
                    problems.error(position, error)
                else:
                    accepted.setdefault(name, []).append(im)
    for name in accepted:  # each account's imports in the order its config lists them
        accepted[name].sort(key=accounts[name].imports.index)
    return accepted


def check_import(accounts: dict[str, ImportsExports], accepted: dict[str, list[Import]], name: str,
                 im: Import) -> str | None:
    """Why nats-server refuses `im` of account `name`, or None."""
    kind = "service" if im.service else "stream"
    exporter = accounts.get(im.account)
    if exporter is None:
        return f"{_q(im.account)} account not defined for {kind} import"
    what = f"Error adding {kind} import {_q(im.subject)}"
    if im.service:
        local, remote = im.local, im.subject
        if not is_valid(local.encode()) or not is_valid(remote.encode()):
            return f"{what}: invalid subject"
        if not approved(exporter, name, remote, service=True, activation=im.activation):
            return f"{what}: service import not authorized"
        if _service_cycle(accepted, im.account, local, {name}):
            return f"{what}: import forms a cycle"
        if has_wildcard(remote.encode()) and remote != local:
            try:
                SubjectMap(local.encode(), remote.encode())
            except MappingError as error:
                return (f"{what}: failed to create mapping transform for service import subject from {_q(local)} "
                        f"to {_q(remote)}: {error} in {local}")
        return None
    if not approved(exporter, name, im.subject, service=False, activation=im.activation):
        return f"{what}: stream import not authorized"
    if im.prefix and not is_literal(im.prefix.encode()):
        return f"{what}: stream import prefix can not contain wildcard tokens"
    to = im.local
    if _stream_cycle(accounts, accepted, im.account, to, {name}) or \
            _stream_cycle(accounts, accepted, im.account, im.subject, {name}):
        return f"{what}: import forms a cycle"
    if has_wildcard(im.subject.encode()) and to != im.subject:
        try:
            SubjectMap(im.subject.encode(), to.encode())
        except MappingError as error:
            return (f"{what}: failed to create mapping transform for stream import subject from {_q(im.subject)} "
                    f"to {_q(to)}: {error} in {to}")
    if any(not o.service and o.account == im.account and o.subject == im.subject for o in accepted.get(name, [])):
        return f"{what}: stream import already exists"
    return None


def check_accounts(accounts: dict[str, object], problems: Problems, position: Position | None) -> None:
    """The load-time check of every configured account's imports (options.Account has `imports`, `exports`)."""
    resolve({name: ImportsExports(list(getattr(a, "exports")), list(getattr(a, "imports")))
             for name, a in accounts.items()}, problems, position)
