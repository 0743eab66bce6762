"""The one walker over the record batches of a buffer or a file, with an explicit bad-batch policy.

Everything that steps from batch to batch by the 12-byte prefix (baseOffset, batchLength) goes
through ``walk_batches``: record iteration, the produce path splitting a request into batches,
``FileRecords``, segment validation and index rebuild, ``log dump`` and the Spark scanner. They
differ only in what they check and in what a bad batch means to them, which is the policy:

- ``STOP``: the first bad batch ends the walk (recovery truncates there; a produce is rejected);
- ``SKIP``: report it and go on after it when its length can be trusted (a CRC mismatch or a
  batch the caller's check rejects), stop when the framing itself is broken (``log dump``);
- ``RESYNC``: report the damaged bytes and go on at the next position holding a plausible,
  CRC-valid batch the caller's check accepts (offline readers that want every intact batch).

A bad batch is yielded as a ``BadBatch`` (never raised), so each caller words or raises it its
own way. Bytes come through a ``BatchWindow``: a whole in-memory buffer, or a file read in
bounded chunks with ``pread`` (so a 1 GiB segment is walked in a few MiB).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import Enum, StrEnum
from typing import NamedTuple

import crc32c as _crc32c

from .batch import (
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    BatchHeader,
    CompressionType,
    InvalidBatchError,
    compute_crc,
    header_from_fields,
    unpack_header,
    validate_structure,
)

Buffer = bytes | bytearray | memoryview
FILE_CHUNK = 8 * 1024 * 1024

_MAGIC_AT = 16  # position of the magic byte in a batch header
_MAGIC = bytes([MAGIC_V2])
_KNOWN_ATTRIBUTES = 0x7F  # compression, timestamp type, transactional, control, delete horizon
_CODEC_MASK = 0x07
_MAX_CODEC = max(CompressionType)


class OnBadBatch(Enum):
    STOP = "stop"
    SKIP = "skip"
    RESYNC = "resync"


class BadKind(StrEnum):
    PARTIAL = "partial_batch"  # too few bytes left for a header or for the batch it frames
    INVALID = "invalid_batch"  # the header is not a v2 batch header (magic, lengths, codec)
    TOO_LARGE = "too_large"  # framed, but above the caller's max_batch_size
    CRC = "crc_mismatch"
    REJECTED = "rejected"  # framed and CRC-valid, refused by the caller's check (offsets)


class BatchPosition(NamedTuple):
    """A batch that passed the walk's checks, and where it starts."""

    position: int
    header: BatchHeader

    @property
    def end(self) -> int:
        return self.position + self.header.size


class BadBatch(NamedTuple):
    """Bytes at ``position`` that are not a batch the walk accepts.

    ``size`` is how far the bad region reaches: the batch's own size when it is framed (SKIP),
    up to the next valid batch or the end (RESYNC), the rest of the data otherwise.
    ``header`` is what the bytes claim to be when they parse as one; ``computed_crc`` is set
    when a CRC was computed.
    """

    position: int
    size: int
    kind: BadKind
    reason: str
    header: BatchHeader | None
    computed_crc: int | None = None


# BatchPosition(pos, header) without the Python-level __new__ NamedTuple generates: one is
# made per batch on the produce and read paths, and this halves what it costs.
_batch_position = tuple.__new__

# (window, position, header) -> None to accept the batch, else why it is refused. A stateful
# check (expected offsets) records a batch as accepted when it returns None.
BatchCheck = Callable[["BatchWindow", int, BatchHeader], str | None]


class BatchWindow:
    """The bytes being walked, seen through one buffer.

    In memory: the whole buffer. From a file: ``pread(position, n)`` is called for chunks of
    ``chunk`` bytes (more when one batch is bigger and ``get`` needs it whole); a short read
    means the file ended there (a live segment truncated under a reader).
    """

    __slots__ = ("buf", "chunk", "pread", "size", "sparse", "start")

    def __init__(
        self,
        data: Buffer = b"",
        *,
        pread: Callable[[int, int], Buffer] | None = None,
        size: int | None = None,
        chunk: int = FILE_CHUNK,
    ) -> None:
        self.buf: Buffer = data
        self.start = 0
        self.pread = pread
        self.size = len(data) if size is None else size
        self.chunk = chunk
        # Header-only walks over big batches: read just the header, not a chunk that would
        # hold one header and bytes that are skipped.
        self.sparse = False

    def get(self, pos: int, n: int) -> tuple[Buffer, int]:
        """A buffer and the index of file position ``pos`` in it, with ``n`` bytes after it
        unless the data ends first."""
        rel = pos - self.start
        if rel >= 0 and rel + n <= len(self.buf) or self.pread is None:
            return self.buf, rel
        want = min(n if self.sparse else max(self.chunk, n), self.size - pos)
        self.buf = self.pread(pos, want)
        self.start = pos
        if len(self.buf) < want:
            self.size = pos + len(self.buf)
        return self.buf, 0

    def crc(self, pos: int, size: int) -> int:
        """CRC-32C of the batch of ``size`` bytes at ``pos``; one bigger than a chunk is
        checksummed piecewise, so memory stays bounded."""
        if self.pread is None or size <= self.chunk:
            buf, rel = self.get(pos, size)
            return compute_crc(buf, rel, size)
        crc = 0
        offset, end = pos + CRC_START, pos + size
        while offset < end:
            piece = self.pread(offset, min(self.chunk, end - offset))
            if not piece:
                break
            crc = _crc32c.crc32c(piece, value=crc)
            offset += len(piece)
        return crc

    def header_at(self, pos: int) -> BatchHeader | None:
        """What the bytes at ``pos`` claim as a header; None when too few remain."""
        if self.size - pos < HEADER_SIZE:
            return None
        buf, rel = self.get(pos, HEADER_SIZE)
        if len(buf) - rel < HEADER_SIZE:
            return None
        return BatchHeader.parse(buf, rel)

    def bytes_of(self, pos: int, size: int) -> Buffer:
        buf, rel = self.get(pos, size)
        return memoryview(buf)[rel : rel + size]


def walk_batches(
    window: BatchWindow | Buffer,
    start: int = 0,
    *,
    verify_crc: bool = True,
    on_bad: OnBadBatch = OnBadBatch.STOP,
    max_batch_size: int | None = None,
    check: BatchCheck | None = None,
) -> Iterator[BatchPosition | BadBatch]:
    """The batches from ``start`` on, and the bad ones as the policy reports them (module doc).

    Checks, in Kafka's order: framing and structure, ``max_batch_size``, the CRC (when
    ``verify_crc``), then ``check``. Trailing bytes too short for a batch are a PARTIAL bad
    batch; a caller for which a partial tail is normal (a fetch response) ignores it.
    """
    win = window if isinstance(window, BatchWindow) else BatchWindow(window)
    pos = start
    while pos < win.size:
        bad = _bad_at(win, win.buf, pos, win.size, verify_crc, max_batch_size, check)
        if type(bad) is BatchPosition:
            yield bad
            pos += bad.header.size
            continue
        assert isinstance(bad, BadBatch)
        if on_bad is OnBadBatch.STOP:
            yield bad
            return
        if on_bad is OnBadBatch.SKIP:
            yield bad
            if bad.kind not in (BadKind.CRC, BadKind.REJECTED):
                return
            pos += bad.size
            continue
        found = _resync(win, pos + 1, check)
        if found is None:
            yield bad._replace(size=win.size - pos)
            return
        yield bad._replace(size=found.position - pos)
        yield found
        pos = found.end


def split_batches(
    buf: Buffer, *, max_batch_size: int | None = None
) -> list[BatchPosition] | BadBatch:
    """Every batch of an in-memory payload (a produce request's records), CRCs checked, or
    the first bad one. The STOP walk without a generator: it runs once per produced batch."""
    batches = []
    pos, end = 0, len(buf)
    view = memoryview(buf)
    limit = end if max_batch_size is None else max_batch_size
    crc = _crc32c.crc32c
    while pos < end:
        if end - pos >= HEADER_SIZE:
            fields = unpack_header(buf, pos)
            size = fields[1] + LOG_OVERHEAD
            # The usual batch passes validate_structure's checks, the size limits and its CRC
            # here, in line (this runs for every produced batch); any other goes to _bad_at,
            # which finds what is wrong and words it.
            if (
                fields[3] == MAGIC_V2
                and HEADER_SIZE <= size <= limit
                and size <= end - pos
                and fields[6] >= 0  # lastOffsetDelta
                and fields[12] >= 0  # recordsCount
                and fields[5] & _CODEC_MASK <= _MAX_CODEC
                and crc(view[pos + CRC_START : pos + size]) == fields[4]
            ):
                batches.append(_batch_position(BatchPosition, (pos, header_from_fields(fields))))
                pos += size
                continue
        item = _bad_at(None, buf, pos, end, True, max_batch_size, None)
        if type(item) is not BatchPosition:
            return item  # type: ignore[return-value]
        batches.append(item)
        pos += item.header.size
    return batches


def complete_batches(
    window: BatchWindow | Buffer, start: int = 0, *, verify_crc: bool = False
) -> Iterator[BatchPosition]:
    """Each complete batch from ``start`` on. A partial trailing batch ends the iteration (a
    fetch response or a segment being appended may end with one); a malformed batch, or one
    failing its CRC when ``verify_crc``, raises InvalidBatchError."""
    for item in walk_batches(window, start, verify_crc=verify_crc):
        if type(item) is BadBatch:
            if item.kind is BadKind.PARTIAL:
                return
            raise InvalidBatchError(f"batch at position {item.position}: {item.reason}")
        yield item  # type: ignore[misc]


def iter_headers(buf: Buffer, *, verify_crc: bool = False) -> Iterator[BatchPosition]:
    """(position, header) of each complete batch in ``buf`` (see ``complete_batches``)."""
    return complete_batches(buf, verify_crc=verify_crc)


def _bad_at(
    win: BatchWindow | None,
    buf: Buffer,
    pos: int,
    end: int,
    verify_crc: bool,
    max_batch_size: int | None,
    check: BatchCheck | None,
) -> BatchPosition | BadBatch:
    """The batch at ``pos`` if it passes every check, else what is wrong with it.

    ``win`` None: ``buf`` holds all the data, up to ``end`` (the produce path's own case)."""
    remaining = end - pos
    if remaining < HEADER_SIZE:
        return BadBatch(
            pos, remaining, BadKind.PARTIAL,
            f"{remaining} bytes are too few for a batch header ({HEADER_SIZE} bytes)", None,
        )  # fmt: skip
    in_memory = win is None or win.pread is None
    if in_memory:
        rel = pos
    else:
        assert win is not None  # not in memory
        buf, rel = win.get(pos, HEADER_SIZE)
        if len(buf) - rel < HEADER_SIZE:  # the file shrank while being read
            return BadBatch(
                pos, win.size - pos, BadKind.PARTIAL, "the file ends inside a batch header", None
            )
    header = BatchHeader.parse(buf, rel)
    try:
        validate_structure(header)
    except InvalidBatchError as exc:
        return BadBatch(pos, remaining, BadKind.INVALID, str(exc), header)
    size = header.size
    if size > remaining:
        return BadBatch(
            pos, remaining, BadKind.PARTIAL,
            f"batch at offset {header.base_offset} needs {size} bytes but only {remaining} remain",
            header,
        )  # fmt: skip
    if max_batch_size is not None and size > max_batch_size:
        return BadBatch(pos, size, BadKind.TOO_LARGE, f"batch of {size} bytes", header)
    computed = None
    if verify_crc:
        computed = compute_crc(buf, pos, size) if win is None or in_memory else win.crc(pos, size)
        if computed != header.crc:
            if win is not None and pos + size > win.size:  # the file shrank under the read
                return BadBatch(
                    pos, win.size - pos, BadKind.PARTIAL, "batch runs past the end", header
                )
            return BadBatch(
                pos, size, BadKind.CRC,
                f"CRC mismatch in batch at offset {header.base_offset} "
                f"(stored {header.crc:#010x}, computed {computed:#010x})",
                header, computed,
            )  # fmt: skip
    elif win is not None and not in_memory:
        win.sparse = size >= win.chunk // 8
    if check is not None and win is not None:
        problem = check(win, pos, header)
        if problem is not None:
            return BadBatch(pos, size, BadKind.REJECTED, problem, header, computed)
    return _batch_position(BatchPosition, (pos, header))


def plausible_header(header: BatchHeader, remaining: int) -> bool:
    """Cheap filters that reject almost every random position before a CRC is computed."""
    return (
        header.magic == MAGIC_V2
        and header.attributes & ~_KNOWN_ATTRIBUTES == 0
        and header.partition_leader_epoch >= -1
        and header.producer_epoch >= -1
        and header.base_sequence >= -1
        and 0 <= header.records_count <= header.last_offset_delta + 1
        and header.records_count * MIN_RECORD_SIZE <= header.batch_length
        and HEADER_SIZE <= header.size <= remaining
    )


def _resync(win: BatchWindow, pos: int, check: BatchCheck | None) -> BatchPosition | None:
    """The first batch at or after ``pos`` that is plausible, CRC-valid and accepted."""
    while win.size - pos >= HEADER_SIZE:
        buf, rel = win.get(pos, HEADER_SIZE)
        i = _find_magic(buf, rel + _MAGIC_AT)
        if i < 0:
            # No magic byte in this buffer: continue where a header could still start.
            pos = max(pos + 1, win.start + len(buf) - _MAGIC_AT)
            continue
        candidate = win.start + i - _MAGIC_AT
        header = win.header_at(candidate)
        if header is None:
            return None
        if plausible_header(header, win.size - candidate):
            try:
                validate_structure(header, available=win.size - candidate)
            except InvalidBatchError:
                pass
            else:
                if win.crc(candidate, header.size) == header.crc and (
                    check is None or check(win, candidate, header) is None
                ):
                    return BatchPosition(candidate, header)
        pos = candidate + 1
    return None


def _find_magic(buf: Buffer, at: int) -> int:
    if isinstance(buf, memoryview):
        i = bytes(buf[at:]).find(_MAGIC)
        return i if i < 0 else at + i
    return buf.find(_MAGIC, at)
