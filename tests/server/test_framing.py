from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logkeel.server.network.framing import (
    DEFAULT_MAX_REQUEST_BYTES,
    DIRECT_FRAME_BYTES,
    FIRST_BODY_BYTES,
    GROWTH,
    WHOLE_FRAME_BYTES,
    FrameDecoder,
    FrameTooLarge,
    NegativeFrameSize,
    encode_frame,
)
from logkeel.server.network.request_memory import TRIM_BYTES, RequestMemory


def test_default_limit_is_kafkas_socket_request_max_bytes() -> None:
    assert DEFAULT_MAX_REQUEST_BYTES == 104857600
    assert FrameDecoder().max_frame_bytes == 104857600


def test_encode_frame_prefixes_big_endian_size() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"


def test_frames_in_one_chunk_come_out_in_order() -> None:
    decoder = FrameDecoder()
    data = encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three")
    assert decoder.feed(data) == [b"one", b"", b"three"]
    assert decoder.buffered == 0


def test_frame_fed_byte_by_byte() -> None:
    decoder = FrameDecoder()
    out: list[bytes] = []
    for byte in encode_frame(b"hello") + encode_frame(b"world"):
        out += decoder.feed(bytes([byte]))
    assert out == [b"hello", b"world"]
    assert decoder.buffered == 0


def test_partial_frame_is_kept_until_complete() -> None:
    decoder = FrameDecoder()
    data = encode_frame(b"x" * 100)
    assert decoder.feed(data[:50]) == []
    assert decoder.buffered == 50
    assert decoder.feed(data[50:]) == [b"x" * 100]
    assert decoder.buffered == 0


def test_frame_of_exactly_the_limit_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    assert decoder.feed(encode_frame(b"0123456789")) == [b"0123456789"]


def test_oversized_size_is_rejected_before_the_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=10)
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(struct.pack(">i", 11))
    assert info.value.size == 11 and info.value.limit == 10
    assert "socket.request.max.bytes" in str(info.value)


def test_huge_size_does_not_allocate() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"GET / HTTP/1.1\r\n")  # "GET " is 1195725856 as a size
    assert decoder.buffered == 0


def test_negative_size_is_rejected() -> None:
    decoder = FrameDecoder()
    with pytest.raises(NegativeFrameSize) as info:
        decoder.feed(struct.pack(">i", -1) + b"junk")
    assert info.value.size == -1


def test_frames_before_a_bad_size_are_handed_over_with_the_error() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    data = encode_frame(b"good") + encode_frame(b"also good") + struct.pack(">i", 1000)
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(data)
    assert info.value.frames == [b"good", b"also good"]


def test_decoder_stays_failed_after_an_error() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLarge):
        decoder.feed(encode_frame(b"ok") + struct.pack(">i", 1000))
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(encode_frame(b"more"))
    assert info.value.frames == []  # the good frame was handed out once, not again


def test_many_small_frames_after_a_large_partial_one() -> None:
    # Exercises the buffer compaction path: a consumed prefix larger than the threshold.
    decoder = FrameDecoder()
    big = b"b" * 200_000
    small = [bytes([i]) * 10 for i in range(50)]
    stream = encode_frame(big) + b"".join(encode_frame(s) for s in small)
    out: list[bytes] = []
    for i in range(0, len(stream), 70_001):
        out += decoder.feed(stream[i : i + 70_001])
    assert out == [big, *small]


def test_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=-1)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_any_split_of_the_stream_yields_the_same_frames(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder(max_frame_bytes=300)
    out: list[bytes] = []
    for start, end in zip(points, points[1:], strict=False):
        out += decoder.feed(stream[start:end])
    assert out == payloads
    assert decoder.buffered == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_either_frame_or_fail_cleanly(data: bytes) -> None:
    decoder = FrameDecoder(max_frame_bytes=64)
    try:
        frames = decoder.feed(data)
    except (FrameTooLarge, NegativeFrameSize) as exc:
        frames = exc.frames
    assert sum(4 + len(f) for f in frames) <= len(data)
    assert all(len(f) <= 64 for f in frames)


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(
        st.sampled_from([0, 1, 100, DIRECT_FRAME_BYTES - 5, DIRECT_FRAME_BYTES, 70_000, 300_000]),
        max_size=8,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=2_000_000), max_size=20),
)
def test_large_frames_go_to_buffers_of_their_own_whatever_the_split(
    sizes: list[int], cuts: list[int]
) -> None:
    """Frames from DIRECT_FRAME_BYTES up whose size is known before they are whole are
    received into their own buffer (handed out read-only); smaller ones through the stage
    (bytes); the frames are the same either way."""
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    stream = b"".join(encode_frame(p) for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    out: list[bytes | memoryview] = []
    for start, end in zip(points, points[1:], strict=False):
        out += decoder.feed(stream[start:end])
    assert [bytes(f) for f in out] == payloads
    for frame in out:
        if len(frame) > 64 * 1024:  # cannot have arrived whole in the stage
            assert isinstance(frame, memoryview) and frame.readonly
        elif len(frame) < DIRECT_FRAME_BYTES:
            assert type(frame) is bytes
    assert decoder.buffered == 0


def test_the_socket_fills_a_large_frame_in_place() -> None:
    """As asyncio's BufferedProtocol drives it: once the size is known, get_buffer is free room
    in the frame's own buffer, which grows with what arrives (never past GROWTH times it, plus
    the first step), and the frame comes out as that buffer, read-only."""
    payload = bytes(range(256)) * 8 * 1024  # 2 MiB, above WHOLE_FRAME_BYTES
    stream = encode_frame(payload)
    memory = RequestMemory()
    decoder = FrameDecoder(memory=memory)
    first = decoder.get_buffer()
    first[:1000] = stream[:1000]
    assert decoder.buffer_updated(1000) == []
    pos, frames = 1000, []
    while not frames:
        room = decoder.get_buffer()
        assert 0 < len(room) <= len(stream) - pos  # never past this frame
        room[:] = stream[pos : pos + len(room)]
        pos += len(room)
        frames = decoder.buffer_updated(len(room))
        assert memory.used <= max(2 * GROWTH * (pos - 4), FIRST_BODY_BYTES)
    (frame,) = frames
    assert frame == payload and frame.readonly
    assert memory.used == len(payload)  # the caller's to release once the request is done


def test_a_declared_size_costs_nothing_until_bytes_arrive() -> None:
    memory = RequestMemory()
    decoder = FrameDecoder(memory=memory)
    assert decoder.feed(struct.pack(">i", 100 * 1024 * 1024) + b"x" * 10) == []
    assert decoder.reserved == memory.used == FIRST_BODY_BYTES
    decoder.close()
    assert memory.used == 0


def test_a_refused_reservation_blocks_until_memory_is_given_back() -> None:
    memory = RequestMemory(limit=400_000)
    memory.force(300_000)  # held by other connections
    decoder = FrameDecoder(memory=memory)
    payload = b"p" * 3_000_000  # above WHOLE_FRAME_BYTES: its buffer grows
    stream = encode_frame(payload)
    buf = decoder.get_buffer()
    buf[:40_000] = stream[:40_000]
    assert decoder.buffer_updated(40_000) == []
    assert decoder.blocked  # 4 x 40 KB does not fit in what is left
    assert not decoder.retry_memory()
    memory.release(300_000)
    assert decoder.retry_memory() and decoder.reserved == 4 * (40_000 - 4)
    pos, frames = 40_000, []
    while not frames:
        room = decoder.get_buffer()
        room[:] = stream[pos : pos + len(room)]
        pos += len(room)
        frames = decoder.buffer_updated(len(room))
        if decoder.blocked:  # the next step does not fit
            break
    assert decoder.blocked and memory.used <= 400_000
    memory.limit = 4_000_000
    assert decoder.retry_memory()
    while not frames:
        room = decoder.get_buffer()
        room[:] = stream[pos : pos + len(room)]
        pos += len(room)
        frames = decoder.buffer_updated(len(room))
    assert frames == [payload] and memory.used == len(payload)


def test_small_frames_are_reserved_as_they_are_handed_out() -> None:
    memory = RequestMemory(limit=10)
    decoder = FrameDecoder(memory=memory)
    frames = decoder.feed(encode_frame(b"a" * 30) + encode_frame(b"b" * 5))
    assert [bytes(f) for f in frames] == [b"a" * 30, b"b" * 5]
    assert memory.used == 35 and memory.exhausted  # read already: taken past the limit


def test_the_limit_can_change_between_frames() -> None:
    decoder = FrameDecoder(100, limit_name="sasl.server.max.receive.size")
    assert decoder.feed(encode_frame(b"x" * 100)) == [b"x" * 100]
    with pytest.raises(FrameTooLarge, match=r"sasl.server.max.receive.size \(100\)"):
        decoder.feed(encode_frame(b"x" * 101))
    decoder = FrameDecoder(100)
    decoder.set_limit(1000, "socket.request.max.bytes")
    assert decoder.feed(encode_frame(b"x" * 101)) == [b"x" * 101]


def test_request_memory_trims_once_enough_is_given_back() -> None:
    calls: list[int] = []
    memory = RequestMemory(trim=lambda: calls.append(memory.used))
    memory.force(TRIM_BYTES + 100)
    memory.release(TRIM_BYTES - 1)
    assert calls == []
    memory.release(1)  # TRIM_BYTES given back since the peak
    assert calls == [100]
    memory.force(50)
    memory.release(150)
    assert calls == [100] and memory.used == 0


def test_frames_up_to_whole_frame_bytes_get_their_buffer_at_once() -> None:
    memory = RequestMemory()
    decoder = FrameDecoder(memory=memory)
    decoder.feed(struct.pack(">i", WHOLE_FRAME_BYTES) + b"x" * 10)
    assert decoder.reserved == memory.used == WHOLE_FRAME_BYTES
    decoder.close()
    decoder = FrameDecoder(memory=memory)
    decoder.feed(struct.pack(">i", WHOLE_FRAME_BYTES + 1) + b"x" * 10)
    assert decoder.reserved == memory.used == FIRST_BODY_BYTES
