"""Kafka's framing: every request and response is an int32 big-endian size, then that many bytes.

Pure logic, no sockets: ``FrameDecoder`` is fed whatever bytes arrive and hands back complete
frames, so it can be tested (and fuzzed) without a network.
"""

from __future__ import annotations

import struct

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "Frame",
    "FrameDecoder",
    "FrameTooLarge",
    "FramingError",
    "NegativeFrameSize",
    "encode_frame",
]

# Kafka's socket.request.max.bytes default.
DEFAULT_MAX_REQUEST_BYTES = 104_857_600

SIZE_PREFIX = struct.Struct(">i")

# A request frame: bytes, or a read-only memoryview of a large one received in place.
Frame = bytes | memoryview

# Frames of this size or more are received into a buffer of their own; smaller ones through a
# staging buffer of _STAGE_BYTES, which is compacted when less than _MIN_READ_BYTES are free.
DIRECT_FRAME_BYTES = 32 * 1024
_STAGE_BYTES = 64 * 1024
_MIN_READ_BYTES = 16 * 1024


class FramingError(Exception):
    """The byte stream cannot be split into frames any more; the connection must be closed.

    ``frames`` holds the frames that were complete before the bad size in the same ``feed``:
    they are valid requests and, as in Kafka, are still answered before the connection closes.
    """

    frames: list[Frame] = []


class FrameTooLarge(FramingError):
    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"request size {size} is larger than socket.request.max.bytes ({limit})")


class NegativeFrameSize(FramingError):
    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"invalid request size {size}")


class FrameDecoder:
    """Splits a byte stream into frames, enforcing ``socket.request.max.bytes``.

    The size is checked as soon as its four bytes arrive, before any of the body is buffered,
    so an oversized or negative size costs nothing (Kafka's ``InvalidReceiveException``).
    After a ``FramingError`` the decoder is poisoned: the stream has no frame boundary left.

    Bytes are received into the decoder's own buffers (``get_buffer``/``buffer_updated``, as
    asyncio's BufferedProtocol reads): small frames through a staging buffer, each then copied
    out as ``bytes``; a frame of ``DIRECT_FRAME_BYTES`` or more into a buffer of its own
    that the socket fills directly, handed out as a read-only memoryview. A produce request's
    batches are so read from the socket without a copy in Python (they used to be copied
    twice, into a growing buffer and out of it). ``feed`` does the same from bytes in hand.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self.max_frame_bytes = max_frame_bytes
        self._stage: bytearray | None = None  # made on the first read: idle clients cost nothing
        self._start = 0  # first unconsumed byte in the stage
        self._end = 0  # end of the received bytes in the stage
        self._body: bytearray | None = None  # a large frame being received directly
        self._filled = 0
        self._error: FramingError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return self._end - self._start + (self._filled if self._body is not None else 0)

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (then call ``buffer_updated``)."""
        if self._body is not None:
            return memoryview(self._body)[self._filled :]
        stage = self._stage
        if stage is None or self._error is not None:
            stage = self._stage = bytearray(_STAGE_BYTES)
        elif len(stage) - self._end < _MIN_READ_BYTES:
            # Move the partial frame to the front (it is below DIRECT_FRAME_BYTES + 4).
            rest = self._end - self._start
            stage[:rest] = stage[self._start : self._end]
            self._start, self._end = 0, rest
        return memoryview(stage)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        """``nbytes`` were written at the start of the last ``get_buffer``; returns every frame
        they completed, oldest first (without prefixes). Raises ``FramingError`` as ``feed``."""
        if self._error is not None:
            self._error.frames = []
            raise self._error
        if self._body is not None:
            self._filled += nbytes
            if self._filled < len(self._body):
                return []
            frame = memoryview(self._body).toreadonly()
            self._body = None
            return [frame]
        self._end += nbytes
        return self._split()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Adds ``data`` and returns every frame it completed, oldest first (without prefixes).

        Raises ``FramingError`` for a negative or oversized size (Kafka checks the size before
        reading the body, so the body is never buffered); the frames completed by this call
        before the bad size are in the exception's ``frames``.
        """
        frames: list[Frame] = []
        view = memoryview(data)
        while True:
            buf = self.get_buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            try:
                frames += self.buffer_updated(n)
            except FramingError as exc:
                exc.frames = frames + exc.frames
                raise
            view = view[n:]
            if not view:
                return frames

    def _split(self) -> list[Frame]:
        assert self._stage is not None
        stage, pos, end = self._stage, self._start, self._end
        frames: list[Frame] = []
        with memoryview(stage) as view:
            while end - pos >= 4:
                (size,) = SIZE_PREFIX.unpack_from(stage, pos)
                if size < 0 or size > self.max_frame_bytes:
                    error: FramingError
                    if size < 0:
                        error = NegativeFrameSize(size)
                    else:
                        error = FrameTooLarge(size, self.max_frame_bytes)
                    error.frames = frames
                    self._error = error
                    # Drop the buffer: nothing after a bad size can ever be a frame.
                    self._stage = None
                    self._start = self._end = 0
                    raise error
                if end - pos - 4 >= size:
                    frames.append(bytes(view[pos + 4 : pos + 4 + size]))
                    pos += 4 + size
                    continue
                if size >= DIRECT_FRAME_BYTES:
                    # The rest of this frame goes straight into a buffer of its own.
                    body = bytearray(size)
                    have = end - pos - 4
                    body[:have] = view[pos + 4 : end]
                    self._body, self._filled = body, have
                    pos = end
                break
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        return frames


def encode_frame(payload: bytes) -> bytes:
    """``payload`` with its size prefix."""
    return SIZE_PREFIX.pack(len(payload)) + payload
