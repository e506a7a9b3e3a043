"""The `jetstream` batch writer: each task publishes its rows with a bounded window of unacknowledged
publishes and checks every PubAck; an error PubAck (or no stream for the subject) fails the task
with the server's words.

Columns: `subject` (string), `data` (binary or string), optional `headers` (map<string,
array<string>> or map<string, string>). Each message carries a Nats-Msg-Id so a retried task, or
a re-run of the same write (same `writeId` option), is deduplicated by the stream's duplicate
window: the value of the column named by `msgIdColumn` (when not null), else `<writeId>-<partition>-<row>`.

Options: url, msgIdColumn, writeId (default: one per write), window (unacknowledged publishes,
default 256), timeout (seconds to wait for a PubAck, default 30); credentials and TLS as the
readers (credentials.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from appliance.spark.conn import Connection, NatsError, status_of
from appliance.spark.credentials import auth_from_options, tls_from_options

DEFAULT_WINDOW = 256
MSG_ID = "Nats-Msg-Id"


class PublishFailed(NatsError):
    """A PubAck carried an error, or nothing stored the message."""


@dataclass(frozen=True)
class WriteReport(WriterCommitMessage):  # type: ignore[misc]
    partition: int
    published: int
    duplicates: int


def header_block(headers: Mapping[str, Any] | None, msg_id: str) -> bytes:
    """`NATS/1.0\\r\\n` + one line per value + the Nats-Msg-Id (unless the row carries one)."""
    lines = [b"NATS/1.0\r\n"]
    has_id = False
    for key, values in (headers or {}).items():
        if key.lower() == MSG_ID.lower():
            has_id = True
        for value in values if isinstance(values, (list, tuple)) else [values]:
            if value is None:
                continue
            text = f"{key}: {value}"
            if "\r" in text or "\n" in text:
                raise ValueError(f"header {key!r} holds a line break")
            lines.append(text.encode() + b"\r\n")
    if msg_id and not has_id:
        lines.append(f"{MSG_ID}: {msg_id}\r\n".encode())
    lines.append(b"\r\n")
    return b"".join(lines)


def check_ack(payload: bytes, headers: bytes, subject: str) -> bool:
    """True for a duplicate, False for a new message; raises PublishFailed for anything else."""
    code, text = status_of(headers)
    if code == 503:
        raise PublishFailed(f"no stream stores subject {subject!r} (503 no responders)")
    if code:
        raise PublishFailed(f"publish to {subject!r} failed: {code} {text}")
    try:
        ack = json.loads(payload)
    except ValueError:
        raise PublishFailed(f"publish to {subject!r}: not a PubAck: {payload[:200]!r}") from None
    error = ack.get("error")
    if error:
        raise PublishFailed(
            f"publish to {subject!r} failed: {error.get('description')} (err_code {error.get('err_code')})"
        )
    if "seq" not in ack:
        raise PublishFailed(f"publish to {subject!r}: not a PubAck: {payload[:200]!r}")
    return bool(ack.get("duplicate"))


class Publisher:
    """Publishes with at most `window` PubAcks outstanding on one connection."""

    def __init__(self, conn: Connection, window: int, timeout_s: float) -> None:
        self.conn = conn
        self.window = max(window, 1)
        self.timeout_s = timeout_s
        self.prefix = "_INBOX." + os.urandom(8).hex()
        conn.subscribe(self.prefix + ".*")
        self.pending: dict[str, str] = {}  # reply token -> subject
        self.next_token = 0
        self.published = 0
        self.duplicates = 0

    def publish(self, subject: str, payload: bytes, headers: bytes) -> None:
        if len(self.pending) >= self.window:
            # the window is full: take acks until half of it is free, so publishes go out in runs
            # (one flush per run) rather than one per acknowledgement
            while len(self.pending) > self.window // 2:
                self._take_ack()
        token = str(self.next_token)
        self.next_token += 1
        self.conn.publish(subject, payload, reply=f"{self.prefix}.{token}", headers=headers)
        self.pending[token] = subject

    def drain(self) -> None:
        while self.pending:
            self._take_ack()

    def _take_ack(self) -> None:
        try:
            frame = self.conn.next_frame(self.timeout_s)
        except TimeoutError:
            raise PublishFailed(f"no PubAck within {self.timeout_s}s for {len(self.pending)} publishes") from None
        token = frame.subject.rpartition(".")[2]
        subject = self.pending.pop(token, None)
        if subject is None:
            return  # a late answer of an earlier connection's inbox cannot reach here; ignore strays
        if check_ack(frame.payload, frame.headers, subject):
            self.duplicates += 1
        else:
            self.published += 1


class JetStreamWriter(DataSourceWriter):  # type: ignore[misc]
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        names = set(schema.fieldNames())
        missing = {"subject", "data"} - names
        if missing:
            raise ValueError(f"jetstream write: missing column(s) {sorted(missing)}")
        self.options = options
        self.msg_id_column = options.get("msgidcolumn", "")
        if self.msg_id_column and self.msg_id_column not in names:
            raise ValueError(f"jetstream write: msgIdColumn {self.msg_id_column!r} is not a column")
        self.has_headers = "headers" in names
        self.write_id = options.get("writeid") or os.urandom(8).hex()
        self.window = int(options.get("window", DEFAULT_WINDOW))
        self.timeout_s = float(options.get("timeout", "30"))
        self.auth = auth_from_options(options)
        self.tls = tls_from_options(options)
        self.url = options.get("url", "nats://127.0.0.1:4222")

    def write(self, iterator: Iterator[Any]) -> WriteReport:
        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        return self.write_rows(iterator, partition, f"{self.write_id}-{partition}")

    def write_rows(self, rows: Iterator[Any], partition: int, id_prefix: str) -> WriteReport:
        with Connection(self.url, self.auth, tls=self.tls, timeout_s=self.timeout_s) as conn:
            publisher = Publisher(conn, self.window, self.timeout_s)
            for index, row in enumerate(rows):
                subject = row["subject"]
                if not subject:
                    raise ValueError(f"jetstream write: row {index} of partition {partition} has no subject")
                data = row["data"]
                payload = b"" if data is None else data.encode() if isinstance(data, str) else bytes(data)
                chosen = row[self.msg_id_column] if self.msg_id_column else None
                msg_id = str(chosen) if chosen is not None else f"{id_prefix}-{index}"
                headers = row["headers"] if self.has_headers else None
                publisher.publish(subject, payload, header_block(headers, msg_id))
            publisher.drain()
            return WriteReport(partition, publisher.published, publisher.duplicates)
