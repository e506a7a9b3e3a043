"""Message text as the `nats` CLI prints it for sub, req, stream get/view (pure)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from appliance.cli.format import humanize_duration, local_time, parse_go_time, since_ns

NATS_HEADER_LINE = "NATS/1.0"
# Headers nats-server adds to stored/direct messages; `stream view` hides them like natscli.
_VIEW_HIDDEN_HEADERS = frozenset(
    {
        "Nats-Subject",
        "Nats-Stream",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
        "Nats-UpTo-Sequence",
    }
)


def body_text(data: bytes) -> str:
    """natscli's outPutMSGBody: the body (or `nil body`), then blank lines as natscli leaves them."""
    if not data:
        return "nil body\n\n\n"
    text = data.decode("utf-8", errors="replace")
    return (text if text.endswith("\n") else text + "\n") + "\n" + ("" if text.endswith("\n") else "\n")


def header_lines(headers: Mapping[str, str | list[str]], *, indent: str = "") -> list[str]:
    lines = []
    for key, values in headers.items():
        for value in values if isinstance(values, list) else [values]:
            lines.append(f"{indent}{key}: {value}")
    return lines


def parse_header_block(block: bytes) -> dict[str, list[str]]:
    """A `NATS/1.0 ...\\r\\nKey: value\\r\\n\\r\\n` block (as MSG.GET returns it base64-encoded)."""
    headers: dict[str, list[str]] = {}
    lines = block.decode("utf-8", errors="replace").split("\r\n")
    for line in lines[1:] if lines and lines[0].startswith(NATS_HEADER_LINE) else lines:
        key, separator, value = line.partition(":")
        if separator and key:
            headers.setdefault(key.strip(), []).append(value.strip())
    return headers


def sub_message_text(
    counter: int, subject: str, reply: str, headers: Mapping[str, str | list[str]], data: bytes
) -> str:
    """One message of `sub`: `[#1] Received on "subject" with reply "r"`, headers, body."""
    first = f'[#{counter}] Received on "{subject}"' + (f' with reply "{reply}"' if reply else "")
    lines = [first]
    if headers:
        lines.extend(header_lines(headers))
        lines.append("")
    return "\n".join(lines) + "\n" + body_text(data)


def view_message_text(
    seq: int, subject: str, received: str, headers: Mapping[str, list[str]], data: bytes
) -> str:
    """One message of `stream view`: `[5] Subject: orders.new Received: <time>`, headers, body."""
    lines = [f"[{seq}] Subject: {subject} Received: {received}"]
    shown = {key: values for key, values in headers.items() if key not in _VIEW_HIDDEN_HEADERS}
    if shown:
        lines.append("")
        lines.extend(header_lines(shown, indent="  "))
    return "\n".join(lines) + "\n" + body_text(data)


def stored_message_text(stream_name: str, message: dict[str, Any], *, now: datetime) -> str:
    moment = parse_go_time(message.get("time", ""))
    received = "(unknown)"
    if moment is not None:
        received = f"{local_time(moment, None)} ({humanize_duration(since_ns(moment, now))})"
    text = (
        f"Item: {stream_name}#{message.get('seq', 0)} received {received} "
        f"on Subject {message.get('subject')}\n\n"
    )
    if message.get("hdrs"):
        headers = parse_header_block(base64.b64decode(message["hdrs"]))
        text += "Headers:\n" + "\n".join(header_lines(headers, indent="  ")) + "\n\n"
    return text + body_text(base64.b64decode(message.get("data", "")))
