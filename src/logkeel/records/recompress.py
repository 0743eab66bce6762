"""A batch rewritten with another codec (a topic's ``compression.type``) or a corrected
``maxTimestamp``: everything else in its header is kept (offsets, timestamps, producer id,
epoch and sequence, transactional bit), its length and CRC recomputed."""

from __future__ import annotations

from .batch import (
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    CompressionType,
    crc32c,
    pack_header,
)
from .compression import compress

Buffer = bytes | bytearray | memoryview

_CODEC_MASK = 0x07


def rebuild_batch(
    header: BatchHeader,
    section: Buffer,
    codec: CompressionType,
    *,
    level: int | None = None,
    max_timestamp: int | None = None,
    stored: Buffer | None = None,
) -> bytearray:
    """The batch ``header`` heads, its records section ``section`` (decompressed) stored with
    ``codec`` at ``level`` (None: the codec's default). ``stored``: the section as the batch
    holds it, reused when ``codec`` is the batch's own (only ``maxTimestamp`` changes)."""
    if stored is not None and codec == header.attributes & _CODEC_MASK:
        records: Buffer = stored
    else:
        records = compress(codec, section, level) if codec else section
    attributes = header.attributes & ~_CODEC_MASK | int(codec)
    fields = header._replace(
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(records),
        crc=0,
        attributes=attributes,
        max_timestamp=header.max_timestamp if max_timestamp is None else max_timestamp,
    )
    out = bytearray(HEADER_SIZE + len(records))
    out[:HEADER_SIZE] = pack_header(*fields)
    out[HEADER_SIZE:] = records
    out[17:CRC_START] = crc32c(memoryview(out)[CRC_START:]).to_bytes(4, "big")
    return out
