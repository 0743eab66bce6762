"""Kafka's framing: every request and response is an int32 big-endian size, then that many bytes.

Pure logic, no sockets: ``FrameDecoder`` is fed whatever bytes arrive and hands back complete
frames, so it can be tested (and fuzzed) without a network.
"""

from __future__ import annotations

import struct

from logkeel.server.network.request_memory import RequestMemory

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "FIRST_BODY_BYTES",
    "GROWTH",
    "WHOLE_FRAME_BYTES",
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
# A large frame's buffer starts at this (or GROWTH times what has arrived) and grows
# GROWTH-fold as it fills, up to the declared size.
FIRST_BODY_BYTES = 64 * 1024
GROWTH = 4
# Frames up to this size (a producer's whole request at the clients' default 1 MB batches and
# message.max.bytes) get their buffer at once, as before growth existed: growing them cost the
# broker ~20-30% more CPU per MB produced (bench/produce_cpu.py), fresh buffers of varying
# sizes being faulted in. What such buffers can hold unfilled is bounded by the request budget
# (queued.max.request.bytes reserves their whole size).
WHOLE_FRAME_BYTES = 1024 * 1024 + 64 * 1024


class FramingError(Exception):
    """The byte stream cannot be split into frames any more; the connection must be closed.

    ``frames`` holds the frames that were complete before the bad size in the same ``feed``:
    they are valid requests and, as in Kafka, are still answered before the connection closes.
    """

    frames: list[Frame] = []


class FrameTooLarge(FramingError):
    def __init__(self, size: int, limit: int, limit_name: str = "socket.request.max.bytes") -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"request size {size} is larger than {limit_name} ({limit})")


class NegativeFrameSize(FramingError):
    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"invalid request size {size}")


class FrameDecoder:
    """Splits a byte stream into frames, enforcing a size limit (``socket.request.max.bytes``,
    or ``sasl.server.max.receive.size`` before a SASL login: ``set_limit``).

    The size is checked as soon as its four bytes arrive, before any of the body is buffered,
    so an oversized or negative size costs nothing (Kafka's ``InvalidReceiveException``).
    After a ``FramingError`` the decoder is poisoned: the stream has no frame boundary left.

    Bytes are received into the decoder's own buffers (``get_buffer``/``buffer_updated``, as
    asyncio's BufferedProtocol reads): small frames through a staging buffer, each then copied
    out as ``bytes``; a frame of ``DIRECT_FRAME_BYTES`` or more into a buffer of its own
    that the socket fills directly, handed out as a read-only memoryview. A produce request's
    batches are so read from the socket without a copy in Python. ``feed`` does the same from
    bytes in hand.

    Memory follows what arrives, not what the size prefix declares (beyond
    ``WHOLE_FRAME_BYTES``, whose frames get their whole buffer at once): a large frame's buffer
    starts at ``FIRST_BODY_BYTES`` (or ``GROWTH`` times what the stage already holds) and grows
    ``GROWTH``-fold each time it fills, straight to the whole frame once a step would be over
    half of it; so it is never more than ``2 * GROWTH`` times the bytes received (or the first
    step), and a client that declares 100 MiB and sends 14 bytes costs 64 KiB. Growing copies
    what arrived so far: a frame of up to 8 times the first read is allocated once, a larger
    one copies at most a third of itself in all.

    Every byte of a frame is reserved in ``memory`` (``RequestMemory``, the broker-wide
    ``queued.max.request.bytes``) as the buffers grow; a frame handed out keeps its
    ``len(frame)`` bytes reserved, which the caller releases when the request is done. When
    a reservation is refused, ``blocked`` becomes True: the caller stops reading and calls
    ``retry_memory`` when memory is given back.
    """

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        memory: RequestMemory | None = None,
        limit_name: str = "socket.request.max.bytes",
    ) -> None:
        self.max_frame_bytes = 0
        self.limit_name = limit_name
        self.set_limit(max_frame_bytes, limit_name)
        self.memory = memory if memory is not None else RequestMemory()
        self._stage: bytearray | None = None  # made on the first read: idle clients cost nothing
        self._start = 0  # first unconsumed byte in the stage
        self._end = 0  # end of the received bytes in the stage
        self._body: bytearray | None = None  # a large frame being received directly
        self._size = 0  # its declared size (the body's capacity grows up to it)
        self._filled = 0
        self._blocked = False
        self._error: FramingError | None = None

    def set_limit(self, max_frame_bytes: int, limit_name: str) -> None:
        """The largest frame from now on (frames already being received keep theirs)."""
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must not be negative")
        self.max_frame_bytes = max_frame_bytes
        self.limit_name = limit_name

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return self._end - self._start + (self._filled if self._body is not None else 0)

    @property
    def reserved(self) -> int:
        """Bytes of ``memory`` held by the frame being received (handed-out frames aside)."""
        return len(self._body) if self._body is not None else 0

    @property
    def blocked(self) -> bool:
        """The frame being received needs memory that ``memory`` refused: stop reading until
        ``retry_memory`` returns True."""
        return self._blocked

    def retry_memory(self) -> bool:
        """Tries again the reservation that blocked; True once reading may go on."""
        if self._blocked:
            self._blocked = False
            if self._body is not None:
                self._grow_body(force=False)
            else:
                self._split()  # only the partial large frame is in the stage: no frames
        return not self._blocked

    def close(self) -> None:
        """Drops the buffers and gives back the memory of the frame being received."""
        self.memory.release(self.reserved)
        self._body = None
        self._stage = None
        self._start = self._end = self._filled = 0
        self._blocked = False

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (then call ``buffer_updated``)."""
        if self._body is not None:
            if self._filled == len(self._body):
                # Only when a transport reads on although it was asked to pause: take the
                # next step whatever the budget says rather than hand out no room at all.
                self._blocked = False
                self._grow_body(force=True)
            return memoryview(self._body)[self._filled :]
        stage = self._stage
        if stage is None or self._error is not None:
            stage = self._stage = bytearray(_STAGE_BYTES)
        elif len(stage) - self._end < _MIN_READ_BYTES:
            # Move the partial frame to the front (it is below DIRECT_FRAME_BYTES + 4 unless
            # it is a large one blocked for memory; see below).
            rest = self._end - self._start
            stage[:rest] = stage[self._start : self._end]
            self._start, self._end = 0, rest
            if len(stage) == rest:
                # A large frame blocked for memory filled the whole stage while the transport
                # kept reading: move it into a body of its own after all.
                self._blocked = False
                self._start_body(force=True)
                return self.get_buffer()
        return memoryview(stage)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        """``nbytes`` were written at the start of the last ``get_buffer``; returns every frame
        they completed, oldest first (without prefixes). Raises ``FramingError`` as ``feed``."""
        if self._error is not None:
            self._error.frames = []
            raise self._error
        if self._body is not None:
            self._filled += nbytes
            if self._filled < self._size:
                if self._filled == len(self._body):
                    self._grow_body(force=False)
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
        before the bad size are in the exception's ``frames``. Ignores ``blocked`` (the bytes
        are in hand already).
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

    def _grow_body(self, force: bool) -> None:
        body = self._body
        assert body is not None
        capacity = _capacity(self._size, self._filled)
        if not self._reserve(capacity - len(body), force):
            return
        grown = bytearray(capacity)
        grown[: self._filled] = body
        self._body = grown

    def _start_body(self, force: bool) -> bool:
        """Moves the partial large frame at the front of the stage into a body of its own."""
        stage = self._stage
        assert stage is not None
        (size,) = SIZE_PREFIX.unpack_from(stage, self._start)
        have = self._end - self._start - 4
        capacity = _capacity(size, have)
        if not self._reserve(capacity, force):
            return False
        body = bytearray(capacity)
        body[:have] = memoryview(stage)[self._start + 4 : self._end]
        self._body, self._size, self._filled = body, size, have
        self._start = self._end = 0
        return True

    def _reserve(self, nbytes: int, force: bool) -> bool:
        if force:
            self.memory.force(nbytes)
        elif not self.memory.try_reserve(nbytes):
            self._blocked = True
            return False
        return True

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
                        error = FrameTooLarge(size, self.max_frame_bytes, self.limit_name)
                    error.frames = frames
                    self._error = error
                    # Drop the buffer: nothing after a bad size can ever be a frame.
                    self._stage = None
                    self._start = self._end = 0
                    raise error
                if end - pos - 4 >= size:
                    frames.append(bytes(view[pos + 4 : pos + 4 + size]))
                    self.memory.force(size)
                    pos += 4 + size
                    continue
                break
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        if end - pos >= 4 and SIZE_PREFIX.unpack_from(stage, pos)[0] >= DIRECT_FRAME_BYTES:
            # The rest of this frame goes straight into a buffer of its own.
            self._start_body(force=False)
        return frames


def _capacity(size: int, received: int) -> int:
    """The next buffer for a frame of ``size`` of which ``received`` bytes are in: the whole
    frame up to WHOLE_FRAME_BYTES, else GROWTH times what is in (at least FIRST_BODY_BYTES),
    or the whole frame once that is over half of it (a last step of a few bytes would copy the
    whole frame again for nothing)."""
    if size <= WHOLE_FRAME_BYTES:
        return size
    step = max(GROWTH * received, FIRST_BODY_BYTES)
    return size if 2 * step >= size else step


def encode_frame(payload: bytes) -> bytes:
    """``payload`` with its size prefix."""
    return SIZE_PREFIX.pack(len(payload)) + payload
