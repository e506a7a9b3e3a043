"""Deterministic one-line renderings of RAFT values, for logs and golden transcript files."""

from __future__ import annotations

from appliance.raft.confchange import decode_conf_change
from appliance.raft.types import Entry, EntryType, HardState, Message, MessageType, Ready, Snapshot


def entry(e: Entry) -> str:
    if e.type == EntryType.CONF_CHANGE:
        change = decode_conf_change(e.data)
        return f"{e.term}/{e.index} {change.op.name} {change.peer}"
    if not e.data:
        return f"{e.term}/{e.index} EMPTY"
    text = e.data.decode(errors="backslashreplace")
    return f"{e.term}/{e.index} {text[:32]}"


def entries(items: tuple[Entry, ...] | list[Entry]) -> str:
    return ", ".join(entry(e) for e in items)


def hard_state(hs: HardState) -> str:
    return f"HardState term={hs.term} vote={hs.vote or '-'} commit={hs.commit}"


def snapshot(s: Snapshot) -> str:
    voters = ",".join(s.meta.conf.voters) or "-"
    return f"Snapshot index={s.meta.index} term={s.meta.term} voters={voters} data={len(s.data)}B"


def message(m: Message) -> str:
    text = f"{m.sender}->{m.to} {m.type.name} term={m.term}"
    if m.type in (MessageType.APPEND, MessageType.VOTE, MessageType.PRE_VOTE):
        text += f" log={m.log_term}/{m.index}"
    if m.type == MessageType.APPEND:
        text += f" commit={m.commit}"
        if m.entries:
            text += f" [{entries(m.entries)}]"
    if m.type == MessageType.APPEND_RESP:
        text += f" index={m.index}"
        if m.reject:
            text += f" reject hint={m.log_term}/{m.reject_hint}"
    elif m.reject:
        text += " reject"
    if m.type == MessageType.HEARTBEAT:
        text += f" commit={m.commit}"
    if m.snapshot is not None:
        text += f" {snapshot(m.snapshot)}"
    if m.context:
        text += f" ({m.context.decode()})"
    return text


def ready(node: str, rd: Ready) -> list[str]:
    lines = [f"> {node} handling Ready"]
    if rd.hard_state is not None:
        lines.append(f"  {hard_state(rd.hard_state)}")
    if rd.snapshot is not None:
        lines.append(f"  {snapshot(rd.snapshot)}")
    if rd.entries:
        lines.append(f"  Entries: {entries(rd.entries)}")
    if rd.committed:
        lines.append(f"  Committed: {entries(rd.committed)}")
    if rd.messages:
        lines.append("  Messages:")
        lines.extend(f"  {message(m)}" for m in rd.messages)
    return lines
