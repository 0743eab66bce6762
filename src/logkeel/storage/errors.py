"""The exceptions storage raises. Names follow Kafka's error names where one exists."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path


class StorageError(Exception):
    """Base of every error raised by logkeel.storage."""


class KafkaStorageError(StorageError):
    """A low-level IO error inside one log dir.

    Every OSError that escapes storage is turned into this, so that one place (the log-dir
    failure handler) decides what happens, not each caller. ``device_fault`` says which way
    it decides (see ``is_disk_errno``): a device fault takes the dir offline; any other error
    fails the operation that hit it, and at most the partition it names.
    """

    def __init__(self, log_dir: str | Path, message: str, cause: OSError | None = None):
        self.log_dir = str(log_dir)
        self.cause = cause
        super().__init__(f"IO error in log dir {self.log_dir}: {message}")

    @property
    def device_fault(self) -> bool:
        """True unless an OSError with an errno that is not a device fault caused it; an
        error raised without an OSError (a dir that cannot be locked or belongs to another
        cluster) is about the dir itself."""
        return self.cause is None or is_disk_errno(self.cause)


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


# How an OSError inside a log dir is classified (docs/design.md, Fault model).
#
# Device faults: the medium, the filesystem or the mount failed; nothing else in the dir can
# be trusted, so the dir goes offline (KIP-18) and its partitions answer KAFKA_STORAGE_ERROR.
#
#   EIO        input/output error: a bad sector, a dead disk, a FUSE daemon answering EIO
#   EROFS      the filesystem was remounted read-only (ext4 errors=remount-ro)
#   ENOSPC     no space left on the device
#   EDQUOT     disk quota exceeded (the dir's space, as ENOSPC)
#   ENXIO      no such device or address: the block device went away
#   ENODEV     no such device (a removed disk; also mmap on a mount that cannot map)
#   ENOMEDIUM  no medium found (removable media ejected)
#   ENOTCONN   transport endpoint not connected: a FUSE or network mount whose server died
#   ESTALE     stale file handle: a network filesystem lost the file under us
#   EUCLEAN    structure needs cleaning: the filesystem found its own metadata corrupt
#   EBADMSG    bad message: ext4/xfs report a metadata checksum failure with it
#   ETIMEDOUT  a network-backed mount stopped answering
#
# Operation errors: logkeel's own request was refused (a name too long, a path that already
# exists or is missing, a bad argument, a permission, a process limit). The dir is healthy;
# the operation fails with KAFKA_STORAGE_ERROR and the partition it names may go offline
# with the reason, but the dir and every other partition keep serving:
#
#   ENAMETOOLONG, EEXIST, ENOTEMPTY, ENOENT, ENOTDIR, EISDIR, EINVAL, EBADF, EXDEV, ELOOP,
#   EFBIG, EACCES, EPERM, EMFILE, ENFILE, EBUSY, ETXTBSY, EAGAIN, EINTR, ENOMEM,
#   and every errno not listed as a device fault above.
#
# Whatever the errno, an error in a log dir that no longer exists as a directory (unmounted,
# removed: ENOENT) is a device fault; ``LogManager.handle_dir_failure`` checks that.
DEVICE_FAULT_ERRNOS = frozenset(
    {
        errno.EIO,
        errno.EROFS,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.ENXIO,
        errno.ENODEV,
        errno.ENOMEDIUM,
        errno.ENOTCONN,
        errno.ESTALE,
        errno.EUCLEAN,
        errno.EBADMSG,
        errno.ETIMEDOUT,
    }
)


@contextlib.contextmanager
def io_guard(log_dir: str | Path, what: str) -> Iterator[None]:
    """Re-raises any OSError from the block as a KafkaStorageError naming ``log_dir``; its
    ``device_fault`` carries the classification above."""
    try:
        yield
    except KafkaStorageError:
        raise
    except OSError as exc:
        raise KafkaStorageError(log_dir, f"{what}: {exc}", exc) from exc


def is_disk_errno(exc: OSError) -> bool:
    """True when ``exc`` is a device fault (the table above), False for an operation error."""
    return exc.errno in DEVICE_FAULT_ERRNOS


# -- index files ---------------------------------------------------------------------------


class InvalidIndexEntryError(StorageError, ValueError):
    """An append would break the index's ordering or field ranges.

    A StorageError so that rebuilding an index from a corrupt log (the 0.11 index-corruption
    incident, docs/proposals.md) fails one partition, not the broker; a ValueError because for a
    healthy log it is a bug in the caller.
    """


class InvalidOffsetError(InvalidIndexEntryError):
    """Kafka's InvalidOffsetException: an offset no larger than the last one indexed."""


class InvalidTimestampError(InvalidIndexEntryError):
    """A timestamp smaller than the last one in a time index."""


class IndexOffsetOverflowError(StorageError, ValueError):
    """Kafka's IndexOffsetOverflowException: offset - base offset does not fit an int32."""


class IndexFullError(StorageError, ValueError):
    """An append to an index with no free slot; the segment should have been rolled."""
