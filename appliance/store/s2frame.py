"""The S2 framing format (klauspost/compress s2, a superset of Snappy's framing format): what
nats-server's stream snapshots are wrapped in, and so what `nats stream backup` stores as
`stream.tar.s2` and decompresses to show its progress.

    stream identifier chunk  ff 06 00 00 "S2sTwO"
    data chunks              type u8 | length u24 LE | masked CRC-32C u32 LE | data
                             type 00: an S2 (Snappy-compatible) compressed block
                             type 01: uncompressed bytes
    skippable chunks         types 80..fe (padding, index): ignored

The writer compresses each 64 KiB piece into a Snappy-compatible block (native/s2.c, greedy LZ77;
no S2-only elements, so any Snappy or S2 reader decodes it) and stores a piece that does not
shrink (or every piece, without the C extension); the reader takes both kinds, so backups made by
nats-server decode too. Both are incremental and hold at most one chunk. CRC-32C and block
decoding run in C when the extension is built; the pure-Python twins here are the reference and
the fallback.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from collections.abc import Callable
from types import ModuleType

from appliance import native
from appliance.errors import CorruptData

MAGIC_CHUNK = b"\xff\x06\x00\x00S2sTwO"
MAGIC_BODIES = (b"S2sTwO", b"sNaPpY")
CHUNK_COMPRESSED = 0x00
CHUNK_UNCOMPRESSED = 0x01
CHUNK_IDENTIFIER = 0xFF
WRITE_CHUNK_BYTES = 64 * 1024  # Snappy's block limit: the output also reads as a Snappy stream
BLOCK_BYTES_MAX = 4 << 20  # s2's maxBlockSize
CHUNK_BYTES_MAX = BLOCK_BYTES_MAX + BLOCK_BYTES_MAX // 6 + 32 + 4  # MaxEncodedLen + checksum
CRC_MASK_DELTA = 0xA282EAD8


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c_py(data: bytes | memoryview, crc: int = 0) -> int:
    c = crc ^ 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def s2_decode_py(block: bytes | memoryview) -> bytes:
    """One S2/Snappy compressed block (ValueError if malformed)."""
    src = bytes(block)
    n = len(src)
    length = shift = s = 0
    while True:
        if s >= n or shift > 63:
            raise ValueError("s2: bad block length")
        byte = src[s]
        s += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if length > BLOCK_BYTES_MAX:
        raise ValueError("s2: bad block length")
    dst = bytearray()
    offset = 0
    while s < n:
        tag = src[s]
        kind = tag & 3
        if kind == 0:
            x = tag >> 2
            s += 1
            if x >= 60:
                extra = x - 59
                if s + extra > n:
                    raise ValueError("s2: corrupt block")
                x = int.from_bytes(src[s : s + extra], "little")
                s += extra
            size = x + 1
            if size > length - len(dst) or size > n - s:
                raise ValueError("s2: corrupt block")
            dst += src[s : s + size]
            s += size
            continue
        if kind == 1:
            if s + 2 > n:
                raise ValueError("s2: corrupt block")
            toffset = ((tag & 0xE0) << 3) | src[s + 1]
            size = (tag >> 2) & 7
            s += 2
            if toffset == 0:  # S2's repeat: the last offset again
                extra = {5: 1, 6: 2, 7: 3}.get(size, 0)
                if s + extra > n:
                    raise ValueError("s2: corrupt block")
                if extra:
                    size = int.from_bytes(src[s : s + extra], "little") + (4, 1 << 8, 1 << 16)[extra - 1]
                s += extra
            else:
                offset = toffset
            size += 4
        else:
            width = 2 if kind == 2 else 4
            if s + 1 + width > n:
                raise ValueError("s2: corrupt block")
            offset = int.from_bytes(src[s + 1 : s + 1 + width], "little")
            size = 1 + (tag >> 2)
            s += 1 + width
        start = len(dst) - offset
        if offset == 0 or start < 0 or size > length - len(dst):
            raise ValueError("s2: corrupt block")
        if offset >= size:
            dst += dst[start : start + size]
        else:
            for i in range(size):
                dst.append(dst[start + i])
    if len(dst) != length:
        raise ValueError("s2: corrupt block")
    return bytes(dst)


def _load_native() -> ModuleType | None:
    if not native.ENABLED or native.speedups is None:
        return None
    path = getattr(native.speedups, "__file__", None)
    if path is None:
        return None
    loader = importlib.machinery.ExtensionFileLoader("appliance._s2_native", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    if spec is None:
        return None
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError:  # a build without native/s2.c
        return None
    return module


_native = _load_native()
NATIVE = _native  # native/s2.c's module (also archive.py's parser), None without the extension
crc32c: Callable[..., int] = _native.crc32c if _native is not None else crc32c_py
s2_decode: Callable[[bytes | memoryview], bytes] = _native.s2_decode if _native is not None else s2_decode_py
# compression only in C: without it the frames are stored (a pure-Python encoder would be slower
# than sending the bytes as they are)
s2_encode: Callable[[bytes | memoryview], bytes] | None = _native.s2_encode if _native is not None else None


def masked_crc(data: bytes | memoryview) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + CRC_MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes | memoryview, *, first: bool) -> bytes:
    """`data` as data chunks (after the stream identifier when first): compressed where that
    saves at least an eighth (as Snappy's writer decides), else stored."""
    view = memoryview(data)
    parts = [MAGIC_CHUNK] if first else []
    for start in range(0, len(view), WRITE_CHUNK_BYTES):
        piece = view[start : start + WRITE_CHUNK_BYTES]
        kind, body = CHUNK_UNCOMPRESSED, piece
        if s2_encode is not None:
            packed = s2_encode(piece)
            if len(packed) < len(piece) - len(piece) // 8:
                kind, body = CHUNK_COMPRESSED, memoryview(packed)
        size = len(body) + 4
        parts.append(bytes((kind, size & 0xFF, (size >> 8) & 0xFF, size >> 16)))
        parts.append(masked_crc(piece).to_bytes(4, "little"))
        parts.append(bytes(body))
    return b"".join(parts)


class FrameReader:
    """Push decoder: feed() the framed bytes as they come, get the decoded bytes back."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._started = False
        self.decoded_bytes = 0

    def feed(self, data: bytes | memoryview) -> bytes:
        buffer = self._buffer
        buffer += data
        out: list[bytes] = []
        pos = 0
        while len(buffer) - pos >= 4:
            kind = buffer[pos]
            size = buffer[pos + 1] | buffer[pos + 2] << 8 | buffer[pos + 3] << 16
            if not self._started and kind != CHUNK_IDENTIFIER:
                raise CorruptData("not an S2 stream: no stream identifier")
            if size > CHUNK_BYTES_MAX:
                raise CorruptData(f"S2 chunk of {size} bytes is too large")
            if len(buffer) - pos - 4 < size:
                break
            body = memoryview(buffer)[pos + 4 : pos + 4 + size]
            try:
                out.extend(self._chunk(kind, body))
            finally:
                body.release()
            pos += 4 + size
        del buffer[:pos]
        result = b"".join(out)
        self.decoded_bytes += len(result)
        return result

    def _chunk(self, kind: int, body: memoryview) -> list[bytes]:
        if kind == CHUNK_IDENTIFIER:
            if bytes(body) not in MAGIC_BODIES:
                raise CorruptData("not an S2 stream: bad stream identifier")
            self._started = True
            return []
        if kind in (CHUNK_COMPRESSED, CHUNK_UNCOMPRESSED):
            if len(body) < 4:
                raise CorruptData("S2 chunk shorter than its checksum")
            checksum = int.from_bytes(body[:4], "little")
            if kind == CHUNK_COMPRESSED:
                try:
                    data = s2_decode(body[4:])
                except ValueError as exc:
                    raise CorruptData(str(exc)) from None
            else:
                data = bytes(body[4:])
            if masked_crc(data) != checksum:
                raise CorruptData("S2 chunk checksum mismatch")
            return [data]
        if kind <= 0x7F:
            raise CorruptData(f"unsupported S2 chunk type {kind:#x}")
        return []  # padding and skippable chunks

    def finish(self) -> None:
        """The input ended: anything but whole chunks left over is a cut-short stream."""
        if self._buffer:
            raise CorruptData("S2 stream is cut short")
        if not self._started:
            raise CorruptData("not an S2 stream: empty")
