"""Codecs: round trips, the framings Kafka's clients write and read, and corrupt input."""

from __future__ import annotations

import gzip
import os
import struct
import warnings

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.records.batch import CompressionType, InvalidBatchError
from logkeel.records.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    DecompressedTooLarge,
    compress,
    decompress,
    decompress_bounded,
    xerial_snappy_compress,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kafka_codec

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]

# Text-like input (compressible) large enough to span several snappy/lz4 blocks.
LARGE = b"".join(b"record %d of the log, value=%s; " % (i, b"x" * (i % 50)) for i in range(8000))


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000))
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", LARGE, os.urandom(200_000)], ids=["empty", "text", "random"])
def test_round_trip_sizes(codec: CompressionType, data: bytes) -> None:
    compressed = compress(codec, data)
    assert decompress(codec, compressed) == data
    assert decompress(codec, memoryview(b"pad" + compressed)[3:]) == data
    assert decompress(codec, bytearray(compressed)) == data


@pytest.mark.parametrize(
    ("codec", "level"),
    [(CompressionType.GZIP, 1), (CompressionType.GZIP, 9), (CompressionType.LZ4, 9)]
    + [(CompressionType.ZSTD, 1), (CompressionType.ZSTD, 19), (CompressionType.ZSTD, -5)],
)
def test_levels(codec: CompressionType, level: int) -> None:
    assert decompress(codec, compress(codec, LARGE, level)) == LARGE


# --- snappy: xerial framing (Java) and raw (librdkafka) ---


def test_snappy_compress_writes_xerial_framing_in_32k_blocks() -> None:
    out = compress(CompressionType.SNAPPY, LARGE)
    assert out[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", out[8:16]) == (1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        blocks.append(snappy.decompress(out[pos + 4 : pos + 4 + n]))
        pos += 4 + n
    assert pos == len(out)
    assert all(len(b) == XERIAL_BLOCK_SIZE for b in blocks[:-1])
    assert b"".join(blocks) == LARGE


def _hand_xerial(data: bytes, block: int, version_fmt: str = ">ii") -> bytes:
    """snappy-java's stream format, built from its description with python-snappy blocks."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(version_fmt, 1, 1))
    for i in range(0, len(data), block):
        raw = snappy.compress(data[i : i + block])
        out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


@pytest.mark.parametrize("block", [1000, 32 * 1024, 1 << 20])
def test_decompress_hand_built_xerial(block: int) -> None:
    assert decompress(CompressionType.SNAPPY, _hand_xerial(LARGE, block)) == LARGE


def test_decompress_xerial_with_little_endian_version_fields() -> None:
    # Some writers (e.g. redpanda) got the byte order of version/compat wrong; readers ignore it.
    framed = _hand_xerial(LARGE, 32 * 1024, "<ii")
    assert decompress(CompressionType.SNAPPY, framed) == LARGE


def test_decompress_concatenated_xerial_streams() -> None:
    framed = _hand_xerial(b"first part;", 4) + _hand_xerial(b"second part", 4)
    assert decompress(CompressionType.SNAPPY, framed) == b"first part;second part"


def test_decompress_raw_snappy_as_librdkafka_writes() -> None:
    raw = snappy.compress(LARGE)
    assert raw[:8] != XERIAL_MAGIC
    assert decompress(CompressionType.SNAPPY, raw) == LARGE


def test_snappy_interoperates_with_kafka_python() -> None:
    theirs = kafka_codec.snappy_encode(LARGE, xerial_compatible=True)
    assert decompress(CompressionType.SNAPPY, theirs) == LARGE
    assert kafka_codec.snappy_decode(compress(CompressionType.SNAPPY, LARGE)) == LARGE
    # kafka-python's encoder and ours frame identically (same block size and header).
    assert xerial_snappy_compress(LARGE) == theirs


def test_xerial_header_only_is_empty() -> None:
    assert decompress(CompressionType.SNAPPY, compress(CompressionType.SNAPPY, b"")) == b""


@pytest.mark.parametrize(
    "framed",
    [
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 100) + b"short",
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", -5),
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"\x00\x00",
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 3) + b"\xff\xff\xff",
    ],
    ids=["block-past-end", "negative-length", "truncated-length", "corrupt-block"],
)
def test_corrupt_xerial_raises_invalid_batch(framed: bytes) -> None:
    with pytest.raises(InvalidBatchError, match="snappy"):
        decompress(CompressionType.SNAPPY, framed)


# --- lz4: the frame Java's Lz4BlockInputStream accepts ---


def test_lz4_frame_uses_independent_64k_blocks() -> None:
    out = compress(CompressionType.LZ4, LARGE)
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little-endian 0x184D2204
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # block independence: Java refuses linked blocks
    assert not flg & 0x03  # reserved bits
    assert (bd >> 4) & 7 == 4  # 64 KiB maximum block size, like Java's default
    assert lz4.frame.decompress(out) == LARGE


@pytest.mark.parametrize(
    "options",
    [
        {"block_linked": True},
        {"content_checksum": True},
        {"block_checksum": True},
        {"store_size": False},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
)
def test_lz4_reads_other_frame_options(options: dict[str, object]) -> None:
    assert decompress(CompressionType.LZ4, lz4.frame.compress(LARGE, **options)) == LARGE


def test_lz4_concatenated_frames() -> None:
    a, b = compress(CompressionType.LZ4, b"first"), compress(CompressionType.LZ4, b"second")
    assert decompress(CompressionType.LZ4, a + b) == b"firstsecond"


# --- zstd: streamed frames without a content size, as zstd-jni writes ---


def test_zstd_frame_without_content_size() -> None:
    cobj = zstandard.ZstdCompressor(level=3).compressobj()
    streamed = cobj.compress(LARGE) + cobj.flush()
    params = zstandard.get_frame_parameters(streamed)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(CompressionType.ZSTD, streamed) == LARGE


def test_zstd_concatenated_frames() -> None:
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = cobj.compress(b"second") + cobj.flush()
    framed = compress(CompressionType.ZSTD, b"first") + streamed
    assert decompress(CompressionType.ZSTD, framed) == b"firstsecond"


def test_gzip_concatenated_members() -> None:
    data = gzip.compress(b"first") + gzip.compress(b"second")
    assert decompress(CompressionType.GZIP, data) == b"firstsecond"


def test_gzip_output_is_deterministic() -> None:
    assert compress(CompressionType.GZIP, LARGE) == compress(CompressionType.GZIP, LARGE)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_each_codec_matches_kafka_python(codec: CompressionType) -> None:
    encode, decode = {
        CompressionType.GZIP: (kafka_codec.gzip_encode, kafka_codec.gzip_decode),
        CompressionType.SNAPPY: (kafka_codec.snappy_encode, kafka_codec.snappy_decode),
        CompressionType.LZ4: (kafka_codec.lz4_encode, kafka_codec.lz4_decode),
        CompressionType.ZSTD: (kafka_codec.zstd_encode, kafka_codec.zstd_decode),
    }[codec]
    assert decode(compress(codec, LARGE)) == LARGE
    assert decompress(codec, encode(LARGE)) == LARGE


# --- corrupt input: always InvalidBatchError ---


@pytest.mark.parametrize("codec", COMPRESSED)
def test_corrupt_payloads_raise_invalid_batch(codec: CompressionType) -> None:
    good = compress(codec, LARGE)
    corrupt = [
        b"",
        good[: len(good) // 2],
        good[:-1],
        os.urandom(64),
        b"\x00" * 100,
    ]
    if codec != CompressionType.SNAPPY:  # xerial blocks end cleanly; lz4/zstd/gzip must not
        corrupt.append(good + b"trailing garbage")
    for payload in corrupt:
        with pytest.raises(InvalidBatchError, match=codec.name.lower()):
            decompress(codec, payload)


def test_unknown_codec_raises_invalid_batch() -> None:
    with pytest.raises(InvalidBatchError, match="unknown compression"):
        decompress(5, b"abc")
    with pytest.raises(InvalidBatchError, match="unknown compression"):
        decompress(7, b"abc")


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    data=st.binary(max_size=2000),
    flips=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(1, 255)), min_size=1, max_size=3
    ),
    cut=st.none() | st.integers(min_value=0),
)
def test_mangled_payloads_never_raise_anything_else(
    codec: CompressionType, data: bytes, flips: list[tuple[int, int]], cut: int | None
) -> None:
    payload = bytearray(compress(codec, data * 3))
    for where, mask in flips:
        payload[where % len(payload)] ^= mask
    if cut is not None:
        del payload[cut % (len(payload) + 1) :]
    try:
        out = decompress(codec, bytes(payload))
    except InvalidBatchError:
        return
    assert isinstance(out, bytes)


@settings(max_examples=100, deadline=None)
@given(payload=st.binary(max_size=200))
def test_random_bytes_as_raw_snappy(payload: bytes) -> None:
    for framed in (payload, XERIAL_MAGIC + b"\x00\x00\x00\x01" * 2 + payload):
        try:
            out = decompress(CompressionType.SNAPPY, framed)
        except InvalidBatchError:
            continue
        assert isinstance(out, bytes)


def test_cramjam_raw_snappy_is_what_python_snappy_writes() -> None:
    # Guards the assumption that cramjam's raw format is plain snappy blocks.
    assert snappy.decompress(bytes(cramjam.snappy.compress_raw(LARGE))) == LARGE


# --- bounded decompression (a produced batch's payload) ---


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", LARGE, os.urandom(200_000)], ids=["empty", "text", "random"])
def test_bounded_decompression_gives_what_decompress_gives(
    codec: CompressionType, data: bytes
) -> None:
    compressed = compress(codec, data)
    assert decompress_bounded(codec, compressed, len(data)) == data
    assert decompress_bounded(codec, memoryview(b"pad" + compressed)[3:], len(data)) == data


def test_bounded_decompression_reads_every_framing() -> None:
    assert (
        decompress_bounded(CompressionType.SNAPPY, cramjam.snappy.compress_raw(LARGE), 10**6)
        == LARGE
    )
    twice = xerial_snappy_compress(LARGE) + xerial_snappy_compress(LARGE)
    assert decompress_bounded(CompressionType.SNAPPY, twice, 10**6) == LARGE * 2
    members = gzip.compress(b"first") + gzip.compress(b"second")
    assert decompress_bounded(CompressionType.GZIP, members, 100) == b"firstsecond"
    frames = lz4.frame.compress(b"first") + lz4.frame.compress(b"second")
    assert decompress_bounded(CompressionType.LZ4, frames, 100) == b"firstsecond"
    cobj = zstandard.ZstdCompressor().compressobj()
    streamed = compress(CompressionType.ZSTD, b"first") + cobj.compress(b"second") + cobj.flush()
    assert decompress_bounded(CompressionType.ZSTD, streamed, 100) == b"firstsecond"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_a_decompression_bomb_stops_at_the_limit(codec: CompressionType) -> None:
    bomb = compress(codec, b"\x00" * (32 << 20))
    assert len(bomb) < 2 << 20
    with pytest.raises(DecompressedTooLarge, match=f"{codec.name.lower()} payload decompresses"):
        decompress_bounded(codec, bomb, 1 << 20)
    # Exactly at the limit is fine.
    assert len(decompress_bounded(codec, compress(codec, b"\x00" * 1000), 1000)) == 1000


@pytest.mark.parametrize("codec", COMPRESSED)
def test_bounded_decompression_refuses_corrupt_payloads(codec: CompressionType) -> None:
    good = compress(codec, LARGE)
    corrupt = [good[: len(good) // 2], good[:-1], os.urandom(64), b"\x00" * 100]
    if codec != CompressionType.SNAPPY:
        corrupt.append(good + b"trailing garbage")
    for payload in corrupt:
        with pytest.raises(InvalidBatchError, match=codec.name.lower()):
            decompress_bounded(codec, payload, 10**7)


@settings(max_examples=150, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    data=st.binary(max_size=2000),
    flips=st.lists(
        st.tuples(st.integers(min_value=0), st.integers(1, 255)), min_size=1, max_size=3
    ),
)
def test_mangled_payloads_bounded_never_raise_anything_else(
    codec: CompressionType, data: bytes, flips: list[tuple[int, int]]
) -> None:
    payload = bytearray(compress(codec, data * 3))
    for where, mask in flips:
        payload[where % len(payload)] ^= mask
    try:
        out = decompress_bounded(codec, bytes(payload), 10_000)
    except InvalidBatchError:
        return
    assert isinstance(out, bytes) and len(out) <= 10_000
