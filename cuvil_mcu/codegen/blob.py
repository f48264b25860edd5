"""The weights blob (`gen --weights separate`): the constants section of the
header as one file, <name>.weights.bin, bound at run time by
<p>_bind_weights(blob, size) (templates/model.h.j2 holds the C side).

Layout (all integers little-endian u32; every constant at an offset that is a
multiple of ALIGN from the blob's start, so the kernels' word and vector
loads see the alignment they see in the header's arrays):

    0  magic "CUVW"
    4  format version (FORMAT)
    8  graph hash, 16 bytes: SHA-256 of the compiler version and the header's
       text with the constants left out (code, offsets, sizes, symbol types;
       the model file name in the first comment excluded),
       so any change of code or layout refuses an old blob
   24  header bytes (HEADER = 64)
   28  payload bytes (blob size - HEADER)
   32  alignment of every constant (ALIGN)
   36  number of constant arrays
   40  CRC-32 (IEEE 802.3, as zlib.crc32) of the whole blob except these 4 bytes
   44  zero up to HEADER
   64  the constants, each padded to ALIGN
"""
from __future__ import annotations

import hashlib
import struct
import zlib

MAGIC = b"CUVW"
FORMAT = 1
HEADER = 64
ALIGN = 16
CRC_AT = 40
HASH_PLACEHOLDER = "CUVIL_GRAPH_HASH_PLACEHOLDER"


def layout(consts) -> tuple[dict[str, int], int]:
    """{symbol: byte offset from the blob's start}, total blob bytes."""
    offsets, pos = {}, HEADER
    for c in consts:
        offsets[c.symbol] = pos
        pos += -(-max(c.data.nbytes, 1) // ALIGN) * ALIGN
    return offsets, pos


def graph_hash(text_with_placeholder: str, version: str) -> bytes:
    return hashlib.sha256(f"cuvil-mcu {version}\0weights {FORMAT}\0".encode()
                          + text_with_placeholder.encode()).digest()[:16]


def pack(consts, offsets: dict[str, int], total: int, ghash: bytes) -> bytes:
    buf = bytearray(total)
    for c in consts:
        raw = c.data.astype(c.data.dtype.newbyteorder("<"), copy=False).tobytes()
        buf[offsets[c.symbol]:offsets[c.symbol] + len(raw)] = raw
    struct.pack_into("<4sI16sIIII", buf, 0, MAGIC, FORMAT, ghash, HEADER, total - HEADER, ALIGN, len(consts))
    struct.pack_into("<I", buf, CRC_AT, crc(bytes(buf)))
    return bytes(buf)


def crc(blob: bytes) -> int:
    """The CRC the header checks: over the blob without its CRC field."""
    return zlib.crc32(blob[CRC_AT + 4:], zlib.crc32(blob[:CRC_AT])) & 0xFFFFFFFF


def crc_nibble_table() -> list[int]:
    """CRC-32 of each 4-bit value (reflected polynomial 0xEDB88320): the C
    side updates the CRC a nibble at a time from this 64-byte table."""
    table = []
    for i in range(16):
        c = i
        for _ in range(4):
            c = (c >> 1) ^ (0xEDB88320 if c & 1 else 0)
        table.append(c)
    return table


def parse(blob: bytes) -> dict:
    """The header fields (for tools and tests); ValueError on a short blob."""
    if len(blob) < HEADER:
        raise ValueError(f"weights blob is {len(blob)} bytes, shorter than its {HEADER}-byte header")
    magic, fmt, ghash, hdr, payload, align, n, crc32 = struct.unpack_from("<4sI16sIIIII", blob, 0)
    return dict(magic=magic, format=fmt, graph_hash=ghash.hex(), header=hdr, payload=payload,
                align=align, count=n, crc=crc32)
