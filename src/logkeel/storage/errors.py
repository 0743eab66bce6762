"""The exceptions storage raises. Names follow Kafka's error names where one exists."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path


class StorageError(Exception):
    """Base of every error raised by logkeel.storage."""


class KafkaStorageError(StorageError):
    """A low-level IO error inside one log dir; the handler takes that dir offline.

    Every OSError that escapes storage is turned into this, so that one place
    (the log-dir failure handler) decides what happens, not each caller.
    """

    def __init__(self, log_dir: str | Path, message: str, cause: OSError | None = None):
        self.log_dir = str(log_dir)
        self.cause = cause
        super().__init__(f"IO error in log dir {self.log_dir}: {message}")


class CorruptRecordError(StorageError):
    """A batch failed its CRC or structural checks (Kafka: CORRUPT_MESSAGE)."""


class InvalidRecordError(StorageError):
    """A batch is well formed but not acceptable (Kafka: INVALID_RECORD)."""


class RecordTooLargeError(StorageError):
    """A batch exceeds ``message.max.bytes`` (Kafka: MESSAGE_TOO_LARGE)."""


class OffsetOutOfRangeError(StorageError):
    """A read or truncation asked for an offset outside [log start, log end]."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's sequence is not the next one expected."""


class InvalidProducerEpochError(StorageError):
    """An idempotent producer used an epoch older than the one the log knows (Kafka: INVALID_PRODUCER_EPOCH)."""


class UnknownProducerIdError(StorageError):
    """A producer id with no state and a non-zero sequence (Kafka: UNKNOWN_PRODUCER_ID)."""


class CorruptIndexError(StorageError):
    """An index file is inconsistent with itself or its segment; it can be rebuilt."""


class CorruptSnapshotError(StorageError):
    """A producer-state snapshot failed its CRC or format checks; it can be discarded."""


class CorruptCheckpointError(StorageError):
    """A checkpoint file could not be parsed."""


# errno values that mean the medium or the mount is at fault rather than the caller.
_DISK_ERRNOS = {errno.EIO, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENXIO, errno.ENODEV}


@contextlib.contextmanager
def io_guard(log_dir: str | Path, what: str) -> Iterator[None]:
    """Re-raises any OSError from the block as a KafkaStorageError naming ``log_dir``."""
    try:
        yield
    except KafkaStorageError:
        raise
    except OSError as exc:
        raise KafkaStorageError(log_dir, f"{what}: {exc}", exc) from exc


def is_disk_errno(exc: OSError) -> bool:
    return exc.errno in _DISK_ERRNOS


# -- index files ---------------------------------------------------------------------------


class InvalidIndexEntryError(StorageError, ValueError):
    """An append would break the index's ordering or field ranges.

    A StorageError so that rebuilding an index from a corrupt log (the incident in seeds/)
    fails one partition, not the broker; a ValueError because for a healthy log it is a bug
    in the caller.
    """


class InvalidOffsetError(InvalidIndexEntryError):
    """Kafka's InvalidOffsetException: an offset no larger than the last one indexed."""


class InvalidTimestampError(InvalidIndexEntryError):
    """A timestamp smaller than the last one in a time index."""


class IndexOffsetOverflowError(StorageError, ValueError):
    """Kafka's IndexOffsetOverflowException: offset - base offset does not fit an int32."""


class IndexFullError(StorageError, ValueError):
    """An append to an index with no free slot; the segment should have been rolled."""
