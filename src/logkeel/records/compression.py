"""Compression codecs for the records section of a v2 batch, byte-compatible with Kafka's.

What each codec writes, and why:

- gzip: one gzip member (zlib, level 6 unless told). Reading accepts concatenated members, as
  Java's GZIPInputStream does.
- snappy: the *xerial* framing Kafka's Java clients write (snappy-java's SnappyOutputStream):
  ``\\x82SNAPPY\\x00``, int32 version 1, int32 compat 1, then blocks of
  [int32 compressed length][raw snappy block], each block from 32 KiB of input. librdkafka writes
  raw snappy instead and reads both, so both are accepted here, told apart by the magic.
- lz4: the standard LZ4 frame with *independent* 64 KiB blocks. Java's reader refuses frames with
  linked blocks (the lz4 library's default), which is why the `lz4` package writes here and not
  cramjam, whose frames link blocks.
- zstd: one standard frame. Reading streams the frames, because zstd-jni (Java) writes frames
  without a content size, and accepts several concatenated frames.

Decompression goes through cramjam throughout: it is the fastest here, and checks for truncation
and trailing garbage that `lz4.frame.decompress` silently ignores. Every failure surfaces as
``InvalidBatchError``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import cramjam
import lz4.frame
import zstandard

from .batch import CompressionType, InvalidBatchError

Buffer = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_COMPAT_VERSION = 1
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", XERIAL_VERSION, XERIAL_COMPAT_VERSION)
XERIAL_BLOCK_SIZE = 32 * 1024
_XERIAL_HEADER_SIZE = len(XERIAL_HEADER)
_INT32 = struct.Struct(">i")

# Kafka's defaults (CompressionType.*.defaultLevel() in the Java client).
GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3
# Java uses lz4's fast compressor at its default level; level 0 is the same in the lz4 package.
LZ4_DEFAULT_LEVEL = 0

_zstd_compressors: dict[int, zstandard.ZstdCompressor] = {}


def compress(codec: CompressionType, data: Buffer, level: int | None = None) -> bytes:
    """Compresses the records section of a batch the way Kafka's Java producer does."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        # wbits=31: a gzip wrapper with mtime 0, so equal input gives equal bytes.
        c = zlib.compressobj(GZIP_DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == CompressionType.SNAPPY:
        return xerial_snappy_compress(data)
    if codec == CompressionType.LZ4:
        framed: bytes = lz4.frame.compress(  # lz4 ships no type information
            data,
            compression_level=LZ4_DEFAULT_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
        )
        return framed
    if codec == CompressionType.ZSTD:
        lvl = ZSTD_DEFAULT_LEVEL if level is None else level
        compressor = _zstd_compressors.get(lvl)
        if compressor is None:
            compressor = _zstd_compressors[lvl] = zstandard.ZstdCompressor(level=lvl)
        return compressor.compress(data)
    raise InvalidBatchError(f"unknown compression codec {codec!r}")


def decompress(codec: CompressionType | int, data: Buffer) -> bytes:
    """Inverse of `compress`; also reads raw snappy and streamed/concatenated zstd frames."""
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == CompressionType.SNAPPY:
            if len(data) >= _XERIAL_HEADER_SIZE and data[:8] == XERIAL_MAGIC:
                return xerial_snappy_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CompressionType.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as e:
        name = CompressionType(codec).name.lower()
        raise InvalidBatchError(f"corrupt {name} payload ({len(data)} bytes): {e}") from None
    raise InvalidBatchError(f"unknown compression codec {codec!r}")


def xerial_snappy_compress(data: Buffer, block_size: int = XERIAL_BLOCK_SIZE) -> bytes:
    """Snappy in snappy-java's stream framing, as Kafka's Java clients write it."""
    view = memoryview(data)
    parts: list[bytes | cramjam.Buffer] = [XERIAL_HEADER]
    compress_raw = cramjam.snappy.compress_raw
    pack = _INT32.pack
    for start in range(0, len(view), block_size):
        block = compress_raw(view[start : start + block_size])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def xerial_snappy_decompress(data: Buffer) -> bytes:
    """Reads snappy-java's framing; the version fields are ignored like librdkafka does (some
    writers are known to get their byte order wrong). A second stream header in mid-stream, as
    written when two streams are concatenated, is skipped."""
    view = memoryview(data)
    end = len(view)
    pos = _XERIAL_HEADER_SIZE
    parts: list[bytes] = []
    decompress_raw = cramjam.snappy.decompress_raw
    try:
        while pos < end:
            if end - pos < 4:
                raise InvalidBatchError(f"xerial snappy: truncated block length at {pos}")
            if view[pos : pos + 8] == XERIAL_MAGIC and end - pos >= _XERIAL_HEADER_SIZE:
                pos += _XERIAL_HEADER_SIZE
                continue
            (length,) = _INT32.unpack_from(view, pos)
            pos += 4
            if length < 0 or length > end - pos:
                raise InvalidBatchError(
                    f"xerial snappy: block length {length} at {pos - 4} runs past the end ({end})"
                )
            if length:
                parts.append(bytes(decompress_raw(view[pos : pos + length])))
            pos += length
    except cramjam.DecompressionError as e:
        raise InvalidBatchError(f"corrupt snappy block in xerial stream: {e}") from None
    return b"".join(parts)


class DecompressedTooLarge(InvalidBatchError):
    """A payload that decompresses to more than the caller allows."""


# zstd's densest input: an RLE block, 4 bytes standing for 128 KiB of output, so n bytes of
# input yield at most n << 15 bytes. Bounded decompression feeds it what the rest of the
# budget allows (at least this much), overshooting the limit by a block or so at most.
_ZSTD_EXPANSION_SHIFT = 15
_ZSTD_MIN_STEP = 64


def decompress_bounded(codec: CompressionType | int, data: Buffer, limit: int) -> bytes:
    """``decompress`` that stops past ``limit`` bytes of output (DecompressedTooLarge): a
    produced batch's payload is a client's claim, and a few KiB of zstd or gzip can stand for
    gigabytes. Same codecs and framings as ``decompress``; truncated or trailing bytes are
    refused as ``InvalidBatchError``."""
    name = CompressionType(codec).name.lower() if codec <= CompressionType.ZSTD else str(codec)
    try:
        if codec == CompressionType.GZIP:
            out = _bounded_members(
                data, limit, lambda: zlib.decompressobj(47), lambda d, b, n: d.decompress(b, n)
            )
        elif codec == CompressionType.LZ4:
            out = _bounded_members(
                data,
                limit,
                lz4.frame.LZ4FrameDecompressor,
                lambda d, b, n: d.decompress(b, max_length=n),
            )
        elif codec == CompressionType.ZSTD:
            out = _bounded_zstd(data, limit)
        elif codec == CompressionType.SNAPPY:
            out = _bounded_snappy(data, limit)
        else:
            out = decompress(codec, data)
    except DecompressedTooLarge:
        raise
    except (
        InvalidBatchError,
        zlib.error,
        RuntimeError,
        zstandard.ZstdError,
        cramjam.DecompressionError,
    ) as e:
        raise InvalidBatchError(f"corrupt {name} payload ({len(data)} bytes): {e}") from None
    if len(out) > limit:
        raise DecompressedTooLarge(f"{name} payload decompresses to more than {limit} bytes")
    return out


def _bounded_members(
    data: Buffer,
    limit: int,
    new: Callable[[], Any],
    step: Callable[[Any, bytes, int], bytes],
) -> bytes:
    """Concatenated gzip members or lz4 frames, each decompressed with ``step(decompressor,
    input, max_length)`` until ``limit`` is passed."""
    parts: list[bytes] = []
    total = 0
    rest = bytes(data)
    while rest:
        d = new()
        parts.append(step(d, rest, limit + 1 - total))
        total += len(parts[-1])
        if total > limit:
            break
        if not d.eof:
            raise InvalidBatchError("truncated: the payload ends inside a frame")
        rest = d.unused_data
    return b"".join(parts)


def _bounded_zstd(data: Buffer, limit: int) -> bytes:
    view = memoryview(data)
    parts: list[bytes] = []
    total = pos = 0
    while pos < len(view):
        # Output in 1 MiB pieces rather than zstd's 128 KiB: twice as fast for batch-sized data.
        d = zstandard.ZstdDecompressor().decompressobj(write_size=1 << 20)
        while not d.eof and pos < len(view) and total <= limit:
            step = max(_ZSTD_MIN_STEP, (limit + 1 - total) >> _ZSTD_EXPANSION_SHIFT)
            chunk = view[pos : pos + step]
            pos += len(chunk)
            parts.append(d.decompress(chunk))
            total += len(parts[-1])
        if total > limit:
            break
        if not d.eof:
            raise InvalidBatchError("truncated: the payload ends inside a zstd frame")
        pos -= len(d.unused_data)
    return b"".join(parts)


def _bounded_snappy(data: Buffer, limit: int) -> bytes:
    """Raw snappy and each block of a xerial stream declare their length up front."""
    view = memoryview(data)
    if len(view) >= _XERIAL_HEADER_SIZE and view[:8] == XERIAL_MAGIC:
        total, pos, end = 0, _XERIAL_HEADER_SIZE, len(view)
        while pos + 4 <= end:
            if view[pos : pos + 8] == XERIAL_MAGIC and end - pos >= _XERIAL_HEADER_SIZE:
                pos += _XERIAL_HEADER_SIZE
                continue
            (length,) = _INT32.unpack_from(view, pos)
            if length < 0 or length > end - pos - 4:
                break  # xerial_snappy_decompress words it
            if length:
                total += cramjam.snappy.decompress_raw_len(view[pos + 4 : pos + 4 + length])
            if total > limit:
                raise DecompressedTooLarge(
                    f"snappy payload decompresses to more than {limit} bytes"
                )
            pos += 4 + length
        return xerial_snappy_decompress(view)
    if cramjam.snappy.decompress_raw_len(view) > limit:
        raise DecompressedTooLarge(f"snappy payload decompresses to more than {limit} bytes")
    return bytes(cramjam.snappy.decompress_raw(view))
