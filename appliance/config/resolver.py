"""`resolver` (aliases account_resolver, accounts_resolver) of a NATS config, as nats-server's
opts.go reads it: `MEMORY` (or `MEM`), or `{ type: full, dir: ..., allow_delete, hard_delete,
interval, timeout, limit }`, the `nats` account resolver that keeps account JWTs in a directory
and takes new ones over `$SYS.REQ.CLAIMS.UPDATE` (server/claims_service.py).

Refused as not supported by appliance: `URL(...)` (an HTTP account server) and `type: cache`.
The directory is created when missing, as nats-server's NewDirAccResolver does at load.
"""

from __future__ import annotations

import os
import re

from appliance.config.convert import BadValue, parse_go_duration, type_name
from appliance.config.parser import ConfigMap, Entry
from appliance.config.sections import LoadState

_MEMORY = re.compile(r"(?i)(MEM|MEMORY)\s*")
_URL = re.compile(r'(?i)URL(\(\s*"?([^\s"]*)"?\s*\))?\s*')
_WRONG = ('error parsing account resolver, should be MEM or  URL("url") or a map containing dir and type '
          "state=[FULL|CACHE])")


def load_resolver(entry: Entry, state: LoadState) -> None:
    data = entry.value.data
    trust = state.options.trust
    if isinstance(data, str):
        if _MEMORY.match(data):
            trust.resolver = "MEMORY"
        elif _URL.match(data):
            state.problems.unsupported(entry)
        else:
            raise BadValue(entry.key_position, _WRONG)
        return
    if not isinstance(data, ConfigMap):
        raise BadValue(entry.key_position, f"error parsing operator resolver, wrong type {type_name(data)}")
    values = {e.key.lower(): e.value.data for e in data.values()}
    kind = str(values.get("type", "")).upper()
    if kind in ("MEM", "MEMORY"):
        trust.resolver = "MEMORY"
        return
    if kind == "CACHE":
        state.problems.error(entry.key_position, f'field "{entry.key}" of type CACHE is known to nats-server but '
                             "not supported by appliance (FULL and MEMORY are)")
        return
    if kind != "FULL":
        raise BadValue(entry.key_position, _WRONG)
    _full(entry, values, state)


def _full(entry: Entry, values: dict[str, object], state: LoadState) -> None:
    trust = state.options.trust
    where = entry.key_position
    try:
        for key in ("interval", "timeout", "ttl"):
            if key in values:
                parse_go_duration(str(values[key]))
    except ValueError as error:
        raise BadValue(where, str(error)) from None
    directory = values.get("dir", "")
    if not isinstance(directory, str) or directory == "":
        state.problems.error(where, "dir has no value and needs to point to a directory")
        return
    if os.path.exists(directory) and (not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK)):
        state.problems.error(where, "dir needs to point to an accessible directory")
        return
    if "ttl" in values:
        state.problems.error(where, "FULL does not accept ttl")
    allow_delete = values.get("allow_delete") is True
    if "hard_delete" in values and not allow_delete:
        state.problems.error(where, "hard_delete has no effect without delete")
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as error:
        state.problems.error(where, f"mkdir {directory}: {error.strerror or error}")
        return
    trust.resolver = "FULL"
    trust.resolver_dir = directory
    trust.allow_delete = allow_delete
    trust.hard_delete = values.get("hard_delete") is True
