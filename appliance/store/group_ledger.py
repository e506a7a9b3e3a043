"""Which replicated groups this store has held RAFT state for: how a replica knows it lost it.

RAFT assumes a voter never forgets what it acknowledged or whom it voted for. A replica whose
group directory was deleted or lost (a disk replaced, a directory wiped) starts with an empty log
and would vote as if it had never held anything: it could elect a candidate that lacks committed
entries. To tell "new" from "lost", the store keeps a small append-only ledger under
`<store>/_raft/ledger`, one line per event of a group incarnation (its id and the creation time
of its meta record, so a stream deleted and created again under the same name is a new one):

    held <group> <created_ns>         the group's durable log was created here
    recovering <group> <created_ns>   found empty: it abstains from elections until caught up
    recovered <group> <created_ns>    a leader brought it back up to date
    forgot <group> <created_ns>       deleted on purpose (stream or consumer deleted, moved away)

A whole store lost takes its ledger with it. For that case the ledger's first line names the
store (`store <random id>`, made with the ledger), and the ledger remembers the stores its
peers have had (`peer <server name> <store id>`, from their route INFO, the last few of each): a
server that starts on a new store while a peer remembers another store under its name lost its
store (jetstream/cluster_driver.py), and abstains in every group until caught up.

Each line is fsynced before the log it describes is used. A torn last line (a crash while
appending) is ignored: the event it described is written again by the next start.
"""

from __future__ import annotations

import os
import secrets
from enum import Enum

from appliance.store.fileops import FileOps
from appliance.store.powerloss import file_ops

LEDGER_FILE = "ledger"
PEER_STORES_KEPT = 4  # store ids remembered per peer server


class GroupState(Enum):
    UNKNOWN = "unknown"  # never held here (or forgotten): an empty log is a new one
    HELD = "held"
    RECOVERING = "recovering"


_EVENTS = {"held": GroupState.HELD, "recovering": GroupState.RECOVERING,
           "recovered": GroupState.HELD, "forgot": GroupState.UNKNOWN}


class GroupLedger:
    def __init__(self, directory: str, *, ops: FileOps | None = None) -> None:
        self.ops = ops if ops is not None else file_ops()
        self.ops.make_dirs(directory)
        self.path = os.path.join(directory, LEDGER_FILE)
        self._states: dict[tuple[str, int], GroupState] = {}
        self.store_id = ""
        self.peer_stores: dict[str, list[str]] = {}  # server name -> its store ids, oldest first
        self.new = not self.ops.exists(self.path)  # a store made by this start
        if not self.new:
            self._load()
        if not self.store_id:  # a new store (or a ledger of before store ids): name it
            self.store_id = secrets.token_hex(8)
            if self.new:
                self.ops.create(self.path, b"")
            self._append(f"store {self.store_id} 0\n")
            if self.new:
                self.ops.fsync_dir(directory)  # the ledger's name survives a power cut

    def _load(self) -> None:
        data = self.ops.read_all(self.path)
        whole = data.rfind(b"\n") + 1
        if whole < len(data):  # a torn last line: cut it, or the next event would be glued to it
            self.ops.truncate(self.path, whole)
            self.ops.fsync(self.path)
            data = data[:whole]
        for line in data.split(b"\n")[:-1]:
            parts = line.decode("utf-8", "replace").split(" ")
            if len(parts) == 3 and parts[0] == "store":
                self.store_id = self.store_id or parts[1]
                continue
            if len(parts) == 3 and parts[0] == "peer":
                self._note_peer(parts[1], parts[2])
                continue
            if len(parts) != 3 or parts[0] not in _EVENTS or not parts[2].isdigit():
                continue  # damaged: skipped (at worst a lost group is not detected, as before)
            key = (parts[1], int(parts[2]))
            state = _EVENTS[parts[0]]
            if state is GroupState.UNKNOWN:
                self._states.pop(key, None)
            else:
                self._states[key] = state

    def state(self, group: str, created_ns: int) -> GroupState:
        return self._states.get((group, created_ns), GroupState.UNKNOWN)

    def held(self, group: str, created_ns: int) -> None:
        if self.state(group, created_ns) is GroupState.UNKNOWN:
            self._write("held", group, created_ns)

    def recovering(self, group: str, created_ns: int) -> None:
        if self.state(group, created_ns) is not GroupState.RECOVERING:
            self._write("recovering", group, created_ns)

    def recovered(self, group: str, created_ns: int) -> None:
        if self.state(group, created_ns) is GroupState.RECOVERING:
            self._write("recovered", group, created_ns)

    def forgot(self, group: str, created_ns: int) -> None:
        if self.state(group, created_ns) is not GroupState.UNKNOWN:
            self._write("forgot", group, created_ns)

    def saw_peer(self, name: str, store_id: str) -> bool:
        """A peer server's route INFO named its store; True if that is news (recorded)."""
        if not name or not store_id or any(c.isspace() for c in name + store_id):
            return False
        if store_id in self.peer_stores.get(name, ()):
            return False
        self._append(f"peer {name} {store_id}\n")
        self._note_peer(name, store_id)
        return True

    def _note_peer(self, name: str, store_id: str) -> None:
        ids = self.peer_stores.setdefault(name, [])
        if store_id not in ids:
            ids.append(store_id)
            del ids[:-PEER_STORES_KEPT]

    def _append(self, line: str) -> None:
        self.ops.append(self.path, line.encode())
        self.ops.fsync(self.path)

    def _write(self, event: str, group: str, created_ns: int) -> None:
        assert " " not in group and "\n" not in group, group
        self._append(f"{event} {group} {created_ns}\n")
        state = _EVENTS[event]
        if state is GroupState.UNKNOWN:
            self._states.pop((group, created_ns), None)
        else:
            self._states[(group, created_ns)] = state

    def close(self) -> None:
        self.ops.close_file(self.path)
