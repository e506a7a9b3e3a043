"""`appliance stream backup STREAM DIR` and `appliance stream restore DIR`: the `nats stream
backup|restore` verbs over the standard snapshot API, writing and reading the nats CLI's layout:

    DIR/backup.json     {"config": ..., "state": ...} from the snapshot answer (2-space indent)
    DIR/stream.tar.s2   the snapshot bytes as the server sent them

so a backup taken by either CLI restores with either, against appliance or nats-server.
Chunks go to the file as they arrive (acknowledged at once, as jsm.go does); a restore reads the
file RESTORE_CHUNK_BYTES at a time (at most the server's max_payload), each chunk a request whose
answer is awaited: memory stays bounded by a chunk whatever the backup's size.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass

import click
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from appliance.cli import jsapi
from appliance.cli.format import ibytes
from appliance.cli.jsapi import API_NAME, ApiError, CommandError, Connection, JsonDict, api_request, connection_options
from appliance.cli.render_stream import stream_info_text
from appliance.cli.stream_config import FlagError, parse_size

DATA_FILE = "stream.tar.s2"
META_FILE = "backup.json"
CHUNK_DEFAULT = 128 * 1024  # what jsm.go asks for
RESTORE_CHUNK_BYTES = 256 * 1024  # jsm.go sends 64 KiB: 4x fewer round trips, within max_payload
IDLE_TIMEOUT_S = 5.0  # the nats CLI gives up a backup after this long without data
FINAL_TIMEOUT_S = 3600.0  # the server restores after the last chunk: jsm.go waits up to an hour


@dataclass(frozen=True, slots=True)
class BackupResult:
    bytes_expected: int  # the stream's bytes, from the snapshot answer
    bytes_received: int
    chunks: int
    seconds: float


async def backup_stream(
    client: Client,
    name: str,
    directory: str,
    *,
    consumers: bool = True,
    check: bool = False,
    chunk_size: int = CHUNK_DEFAULT,
    window_size: int = 0,
    timeout_s: float = 5.0,
) -> BackupResult:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    started = time.monotonic()
    inbox = client.new_inbox()
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    received = [0, 0]  # bytes, chunks
    last_data = [time.monotonic()]
    with open(os.path.join(directory, DATA_FILE), "wb") as data_file:

        async def on_chunk(msg: Msg) -> None:
            if done.done():
                return
            if not msg.data:
                status = (msg.headers or {}).get("Status", "")
                if status and status != "204":
                    description = (msg.headers or {}).get("Description", "")
                    done.set_result(f"{status} {description}".strip())
                else:
                    done.set_result("")
                return
            if msg.reply:
                await client.publish(msg.reply, b"")  # ack before writing (as jsm.go)
            data_file.write(msg.data)
            received[0] += len(msg.data)
            received[1] += 1
            last_data[0] = time.monotonic()

        sub = await client.subscribe(inbox, cb=on_chunk, pending_msgs_limit=-1, pending_bytes_limit=-1)
        try:
            body: JsonDict = {"deliver_subject": inbox, "no_consumers": not consumers, "chunk_size": chunk_size}
            if window_size:
                body["window_size"] = window_size
            if check:
                body["jsck"] = True
            answer = await api_request(client, f"$JS.API.STREAM.SNAPSHOT.{name}", body, timeout_s=timeout_s)
            idle_s = max(IDLE_TIMEOUT_S, timeout_s)
            while not done.done():
                try:
                    await asyncio.wait_for(asyncio.shield(done), timeout=0.25)
                except TimeoutError:
                    if time.monotonic() - last_data[0] > idle_s:
                        raise CommandError("backup timed out after receiving no data for a long period") from None
            error = done.result()
        finally:
            await sub.unsubscribe()
    if error:
        raise CommandError(f"snapshot failed: {error}")
    meta = {"config": answer.get("config"), "state": answer.get("state")}
    with open(os.path.join(directory, META_FILE), "w", encoding="utf-8") as meta_file:
        meta_file.write(json.dumps(meta, indent=2))
    state = answer.get("state") or {}
    return BackupResult(
        bytes_expected=int(state.get("bytes", 0)),
        bytes_received=received[0],
        chunks=received[1],
        seconds=time.monotonic() - started,
    )


def read_backup_meta(directory: str) -> JsonDict:
    try:
        with open(os.path.join(directory, META_FILE), encoding="utf-8") as handle:
            meta = json.load(handle)
    except (OSError, ValueError) as exc:
        raise CommandError(f"restore failed: {exc}") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise CommandError(f"restore failed: {META_FILE} has no stream config")
    return meta


async def restore_stream(
    client: Client, directory: str, *, config: JsonDict | None = None, timeout_s: float = 5.0
) -> JsonDict:
    """Restore the backup in directory; the stream_create_response of the restored stream."""
    meta = read_backup_meta(directory)
    stream_config = dict(config or meta["config"])
    name = str(meta["config"].get("name", ""))
    if stream_config.get("name") != name:
        raise CommandError("stream names may not be changed during restore")
    try:
        await api_request(client, f"$JS.API.STREAM.INFO.{name}", None, timeout_s=timeout_s)
    except ApiError as exc:
        if exc.err_code != 10059:
            raise
    else:
        raise CommandError(f'Stream "{name}" already exist')
    request = {"config": stream_config, "state": meta.get("state") or {}}
    answer = await api_request(client, f"$JS.API.STREAM.RESTORE.{name}", request, timeout_s=timeout_s)
    deliver = str(answer.get("deliver_subject", ""))
    chunk_bytes = min(RESTORE_CHUNK_BYTES, client.max_payload or RESTORE_CHUNK_BYTES)
    with open(os.path.join(directory, DATA_FILE), "rb") as data_file:
        while chunk := data_file.read(chunk_bytes):
            reply = await _chunk_request(client, deliver, chunk, timeout_s)
            if reply.data:
                _raise_error(reply.data)
    reply = await _chunk_request(client, deliver, b"", FINAL_TIMEOUT_S)
    result = json.loads(reply.data)
    if result.get("type") != "io.nats.jetstream.api.v1.stream_create_response":
        raise CommandError(f"invalid final response: {reply.data[:200]!r}")
    _raise_error(reply.data)
    return dict(result)


async def _chunk_request(client: Client, subject: str, data: bytes, timeout_s: float) -> Msg:
    try:
        return await client.request(subject, data, timeout=timeout_s)
    except nats.errors.TimeoutError as exc:
        raise CommandError(f"restore failed: nats: timeout on {subject}") from exc


def _raise_error(data: bytes) -> None:
    try:
        answer = json.loads(data)
    except ValueError:
        raise CommandError(f"restore failed: {data[:200]!r}") from None
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        raise ApiError(
            code=int(error.get("code", 0)),
            err_code=int(error.get("err_code", 0)),
            description=str(error.get("description", "unknown error")),
        )


def _size(text: str | None, flag: str) -> int:
    if not text:
        return 0
    try:
        return max(parse_size(text, flag=flag), 0)
    except FlagError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("backup")
@click.argument("name", type=API_NAME)
@click.argument("target", type=click.Path(file_okay=False))
@click.option("--consumers/--no-consumers", default=True, show_default=True, help="Include consumers (config and state).")
@click.option("--check", is_flag=True, help="Checks the stream for health prior to backup.")
@click.option("--chunk-size", default=None, help="Chunk size the server sends (e.g. 128KB).")
@click.option("--window-size", default=None, help="Data in flight at once (e.g. 8MB).")
@click.option("--progress/--no-progress", default=False, help="Accepted for natscli compatibility.")
@connection_options
def backup(
    name: str, target: str, consumers: bool, check: bool, chunk_size: str | None, window_size: str | None,
    progress: bool, conn: Connection,
) -> None:
    """Creates a backup of a stream over the NATS network (nats stream backup)."""
    chunk = _size(chunk_size, "--chunk-size") or CHUNK_DEFAULT
    window = _size(window_size, "--window-size")

    async def verb(client: Client) -> None:
        info = await api_request(client, f"$JS.API.STREAM.INFO.{name}", None, timeout_s=conn.timeout_s)
        expected = int((info.get("state") or {}).get("bytes", 0))
        click.echo(f'Starting backup of Stream "{name}" with {ibytes(expected)}')
        if check:
            click.echo("Health Check was requested, this can take a long time without progress reports\n")
        result = await backup_stream(
            client, name, target, consumers=consumers, check=check, chunk_size=chunk, window_size=window,
            timeout_s=conn.timeout_s,
        )
        click.echo()
        click.echo(
            f"Received {ibytes(result.bytes_received)} compressed data in {result.chunks:,} chunks for stream "
            f'"{name}" in {result.seconds * 1000:.0f}ms'
        )

    jsapi.run(verb, conn)


@click.command("restore")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="Load a different configuration when restoring the stream.")
@click.option("--replicas", type=click.IntRange(min=1), default=None, help="Override how many replicas of the data to create.")
@click.option("--progress/--no-progress", default=False, help="Accepted for natscli compatibility.")
@connection_options
def restore(directory: str, config_file: str | None, replicas: int | None, progress: bool, conn: Connection) -> None:
    """Restore a stream over the NATS network (nats stream restore)."""
    meta = read_backup_meta(directory)
    config = dict(meta["config"])
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError) as exc:
            jsapi.fail(f"restore failed: {exc}")
    if replicas:
        config["num_replicas"] = replicas
    name = str(meta["config"].get("name", ""))

    async def verb(client: Client) -> None:
        click.echo(f'Starting restore of Stream "{name}" from file "{directory}"\n')
        started = time.monotonic()
        answer = await restore_stream(client, directory, config=config, timeout_s=conn.timeout_s)
        click.echo()
        click.echo(f'Restored stream "{name}" in {round(time.monotonic() - started)}s')
        click.echo()
        click.echo(stream_info_text(answer, tz=None))

    jsapi.run(verb, conn)
