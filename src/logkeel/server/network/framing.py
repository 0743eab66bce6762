"""Kafka's framing: every request and response is an int32 big-endian size, then that many bytes.

Pure logic, no sockets: ``FrameDecoder`` is fed whatever bytes arrive and hands back complete
frames, so it can be tested (and fuzzed) without a network.
"""

from __future__ import annotations

import struct

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "FrameDecoder",
    "FrameTooLarge",
    "FramingError",
    "NegativeFrameSize",
    "encode_frame",
]

# Kafka's socket.request.max.bytes default.
DEFAULT_MAX_REQUEST_BYTES = 104_857_600

SIZE_PREFIX = struct.Struct(">i")

# When the consumed prefix of the buffer grows past this, it is cut off; cutting on every frame
# would make a burst of small pipelined frames quadratic in the buffer size.
_COMPACT_THRESHOLD = 64 * 1024


class FramingError(Exception):
    """The byte stream cannot be split into frames any more; the connection must be closed.

    ``frames`` holds the frames that were complete before the bad size in the same ``feed``:
    they are valid requests and, as in Kafka, are still answered before the connection closes.
    """

    frames: list[bytes] = []


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
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0  # start of the unconsumed bytes in _buf
        self._error: FramingError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> list[bytes]:
        """Adds ``data`` and returns every frame it completed, oldest first (without prefixes).

        Raises ``FramingError`` for a negative or oversized size (Kafka checks the size before
        reading the body, so the body is never buffered); the frames completed by this call
        before the bad size are in the exception's ``frames``.
        """
        if self._error is not None:
            self._error.frames = []  # handed out by the call that hit the bad size
            raise self._error
        if not self._pos and not self._buf:
            frames, used = self._split(data, 0)
            if used < len(data):
                self._buf += memoryview(data)[used:]
            return frames
        self._buf += data
        frames, self._pos = self._split(self._buf, self._pos)
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos > _COMPACT_THRESHOLD:
            del self._buf[: self._pos]
            self._pos = 0
        return frames

    def _split(self, buf: bytes | bytearray, pos: int) -> tuple[list[bytes], int]:
        frames: list[bytes] = []
        end = len(buf)
        # Slicing a memoryview and then calling bytes() copies each frame exactly once.
        with memoryview(buf) as view:
            while end - pos >= 4:
                (size,) = SIZE_PREFIX.unpack_from(view, pos)
                if size < 0 or size > self.max_frame_bytes:
                    error: FramingError
                    if size < 0:
                        error = NegativeFrameSize(size)
                    else:
                        error = FrameTooLarge(size, self.max_frame_bytes)
                    error.frames = frames
                    self._error = error
                    # Drop the buffer: nothing after a bad size can ever be a frame.
                    self._buf = bytearray()
                    self._pos = 0
                    raise error
                if end - pos - 4 < size:
                    break
                frames.append(bytes(view[pos + 4 : pos + 4 + size]))
                pos += 4 + size
        return frames, pos


def encode_frame(payload: bytes) -> bytes:
    """``payload`` with its size prefix."""
    return SIZE_PREFIX.pack(len(payload)) + payload
