"""One log directory: its `meta.properties`, lock, checkpoints and clean-shutdown marker."""

from __future__ import annotations

import base64
import binascii
import errno
import fcntl
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from logkeel.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from logkeel.storage.errors import CorruptCheckpointError, KafkaStorageError, StorageError, io_guard
from logkeel.storage.fileio import atomic_write, fsync_dir
from logkeel.storage.topic_partition import (
    DELETE_DIR_SUFFIX,
    NOT_DATA_DIR_SUFFIXES,
    TopicPartition,
    delete_dir_name,
)

log = logging.getLogger(__name__)


META_PROPERTIES = "meta.properties"
# logkeel: what a clean start-up needs to know of each partition dir, written at clean
# shutdown (see LogDir.write_manifest). Kafka ignores it.
STARTUP_MANIFEST = "logkeel-startup-manifest.json"
_MANIFEST_VERSION = 1
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
# Written and removed when an offline dir is probed (logkeel's own).
PROBE_FILE = ".logkeel-probe"
# logkeel: the boot id of the machine's last run with this dir open. A process crash keeps the
# page cache, so its log files hold every record written; a crash of the machine (power loss,
# kernel panic) loses what was not flushed. A new boot id without a clean shutdown tells them
# apart (`LogDir.page_cache_lost`).
BOOT_ID_FILE = "logkeel-boot-id"
BOOT_ID_SOURCE = Path("/proc/sys/kernel/random/boot_id")


def uuid_text(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: base64, URL-safe, unpadded."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def uuid_from_text(text: str) -> uuid.UUID:
    """The inverse of ``uuid_text``; raises ValueError for text that is not 16 bytes of base64."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError(f"not a Kafka Uuid: {text!r}") from exc
    return uuid.UUID(bytes=raw)  # ValueError unless 16 bytes


def random_uuid() -> str:
    """A new Kafka Uuid in its text form."""
    return uuid_text(uuid.uuid4())


class MetaPropertiesError(StorageError):
    pass


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str
    version: int = 1

    def render(self) -> bytes:
        lines = [
            "#",
            f"#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}",
            f"cluster.id={self.cluster_id}",
            f"directory.id={self.directory_id}",
            f"node.id={self.node_id}",
            f"version={self.version}",
        ]
        return ("\n".join(lines) + "\n").encode()

    @classmethod
    def parse(cls, text: str) -> MetaProperties:
        props: dict[str, str] = {}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise MetaPropertiesError(f"malformed line {line!r}")
            props[key.strip()] = value.strip()
        try:
            version = int(props.get("version", "0"))
            node = props.get("node.id", props.get("broker.id"))
            if node is None or "cluster.id" not in props:
                raise MetaPropertiesError("cluster.id or node.id missing")
            return cls(
                props["cluster.id"], int(node), props.get("directory.id") or random_uuid(), version
            )
        except ValueError as exc:
            raise MetaPropertiesError(str(exc)) from exc


class LogDir:
    """A directory of partition directories, owned by this broker while it holds the lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).absolute()
        self.meta: MetaProperties | None = None
        self.offline_reason: str | None = None
        # The machine went down since this dir was last open, without a clean shutdown: records
        # not yet flushed then may be missing from its logs (set by ``open``).
        self.page_cache_lost = False
        self._lock_fd: int | None = None
        self.recovery_points = OffsetCheckpointFile(
            self.path / RECOVERY_POINT_CHECKPOINT_FILE, self.path
        )
        self.log_start_offsets = OffsetCheckpointFile(
            self.path / LOG_START_OFFSET_CHECKPOINT_FILE, self.path
        )
        self.replication_offsets = OffsetCheckpointFile(
            self.path / REPLICATION_OFFSET_CHECKPOINT_FILE, self.path
        )

    def __repr__(self) -> str:
        return f"LogDir({self.path})"

    @property
    def online(self) -> bool:
        return self.offline_reason is None

    def open(self, cluster_id: str, node_id: int) -> None:
        """Creates, locks and identifies the dir. A damaged meta.properties is rewritten."""
        with io_guard(self.path, "opening log dir"):
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock()
            meta_path = self.path / META_PROPERTIES
            meta = None
            if meta_path.exists():
                try:
                    meta = MetaProperties.parse(meta_path.read_text(errors="replace"))
                except MetaPropertiesError as exc:
                    log.warning(
                        "%s: %s is unreadable (%s); writing a new one",
                        self.path,
                        META_PROPERTIES,
                        exc,
                    )
            if meta is not None and meta.cluster_id != cluster_id:
                raise KafkaStorageError(
                    self.path,
                    f"{META_PROPERTIES} belongs to cluster {meta.cluster_id}, not {cluster_id}",
                )
            if meta is not None and meta.node_id != node_id:
                raise KafkaStorageError(
                    self.path, f"{META_PROPERTIES} belongs to node {meta.node_id}, not {node_id}"
                )
            if meta is None or meta.version != 1:
                meta = MetaProperties(
                    cluster_id, node_id, meta.directory_id if meta else random_uuid()
                )
                atomic_write(meta_path, meta.render())
            self.meta = meta
            self._note_boot()

    def _note_boot(self) -> None:
        """Sets ``page_cache_lost`` from the boot id recorded at the last open, and records
        this boot's. Without a boot id (not Linux) nothing is known: never set."""
        try:
            boot = BOOT_ID_SOURCE.read_text().strip()
        except OSError:
            return
        recorded = self.path / BOOT_ID_FILE
        try:
            previous = recorded.read_text().strip()
        except FileNotFoundError:
            previous = None
        self.page_cache_lost = previous not in (None, boot) and not self.was_clean
        if self.page_cache_lost:
            log.warning(
                "%s: the machine restarted (boot id %s, was %s) without a clean shutdown: "
                "records not flushed before it may be missing", self.path, boot, previous,
            )  # fmt: skip
        if previous != boot:
            atomic_write(recorded, boot.encode())

    def probe(self) -> None:
        """Writes, syncs, reads back and removes a small file: raises ``KafkaStorageError``
        while the disk still fails (deciding whether a failed dir may come back)."""
        probe = self.path / PROBE_FILE
        data = os.urandom(16)
        with io_guard(self.path, "probing log dir"):
            atomic_write(probe, data)
            if probe.read_bytes() != data:
                raise OSError(errno.EIO, "probe read back other bytes", str(probe))
            probe.unlink()

    def _lock(self) -> None:
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise KafkaStorageError(
                self.path, "locked by another process (is a broker running?)"
            ) from None
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- clean shutdown marker ----------------------------------------------------------------
    @property
    def was_clean(self) -> bool:
        return (self.path / CLEAN_SHUTDOWN_FILE).exists()

    def mark_clean(self) -> None:
        with io_guard(self.path, "writing clean shutdown marker"):
            atomic_write(self.path / CLEAN_SHUTDOWN_FILE, b"")

    def clear_clean_marker(self) -> None:
        with io_guard(self.path, "removing clean shutdown marker"):
            (self.path / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)

    # -- start-up manifest ----------------------------------------------------------------------
    def write_manifest(self, partitions: dict[str, object], newer_than_ns: int = 0) -> None:
        """Caches each partition dir's listing (keyed by dir name) for the next clean start.

        Written just before the clean-shutdown marker; each entry carries its dir's mtime, so
        a dir changed since (a file added, removed or renamed) is listed again. The manifest's
        own time must be later than ``newer_than_ns`` (the newest time it records): the next
        start trusts only what is older than the manifest (see recovery.vouch), and file times
        come from a clock that ticks every few milliseconds, so it is written again once the
        clock has moved on.
        """
        data = json.dumps(
            {"version": _MANIFEST_VERSION, "partitions": partitions}, separators=(",", ":")
        ).encode()
        path = self.path / STARTUP_MANIFEST
        with io_guard(self.path, f"writing {STARTUP_MANIFEST}"):
            for _ in range(20):
                atomic_write(path, data)
                if os.stat(path).st_mtime_ns > newer_than_ns:
                    return
                time.sleep(0.005)

    def read_manifest(self) -> tuple[dict[str, object], int | None]:
        """The cached listings and the manifest's modification time, or none if the manifest
        is missing or unreadable (a cache)."""
        try:
            with io_guard(self.path, f"reading {STARTUP_MANIFEST}"):
                path = self.path / STARTUP_MANIFEST
                mtime_ns = os.stat(path).st_mtime_ns
                raw = path.read_bytes()
        except KafkaStorageError as exc:
            if isinstance(exc.cause, FileNotFoundError):
                return {}, None
            raise
        try:
            data = json.loads(raw)
            if data.get("version") != _MANIFEST_VERSION or not isinstance(
                data.get("partitions"), dict
            ):
                raise ValueError("unknown manifest version")
            return data["partitions"], mtime_ns
        except (ValueError, AttributeError) as exc:
            log.warning("%s: ignoring unreadable %s: %s", self.path, STARTUP_MANIFEST, exc)
            return {}, None

    def remove_manifest(self) -> None:
        with io_guard(self.path, f"removing {STARTUP_MANIFEST}"):
            (self.path / STARTUP_MANIFEST).unlink(missing_ok=True)

    # -- partitions ------------------------------------------------------------------------------
    def partition_dirs(self) -> list[Path]:
        """Partition directories; ones marked for deletion are removed on the way."""
        with io_guard(self.path, "listing log dir"):
            for entry in os.scandir(self.path):
                if entry.name.endswith(DELETE_DIR_SUFFIX) and entry.is_dir():
                    _remove_tree(Path(entry.path))
        return list_partition_dirs(self.path)

    def read_checkpoint(self, which: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        """A missing or corrupt checkpoint reads as empty: recovery then starts from scratch."""
        try:
            with io_guard(self.path, f"reading {which.path.name}"):
                return which.read() if which.path.exists() else {}
        except CorruptCheckpointError as exc:
            log.warning("%s: ignoring corrupt checkpoint: %s", self.path, exc)
            return {}


def is_partition_dir_name(name: str) -> bool:
    """``<topic>-<partition>``, and not a replica being deleted, moved in or set aside
    (``-delete``, ``-future``, ``-stray``): those do not hold the replica's data."""
    if name.endswith(NOT_DATA_DIR_SUFFIXES):
        return False
    try:
        TopicPartition.parse_dir_name(name)
    except ValueError:
        return False
    return True


def list_partition_dirs(log_dir: Path) -> list[Path]:
    """The partition directories of a log dir, in name order; read-only."""
    with io_guard(log_dir, "listing log dir"):
        entries = sorted(os.scandir(log_dir), key=lambda e: e.name)
        return [Path(e.path) for e in entries if is_partition_dir_name(e.name) and e.is_dir()]


def partition_dir_named(log_dir: Path, cause: OSError | None) -> str | None:
    """The name of the partition dir of ``log_dir`` holding a file that ``cause`` names."""
    for name in (getattr(cause, "filename", None), getattr(cause, "filename2", None)):
        if not isinstance(name, str | Path):
            continue
        try:
            first = Path(name).absolute().relative_to(log_dir).parts[0]
        except (ValueError, IndexError):
            continue
        if is_partition_dir_name(first):
            return first
    return None


def mark_for_deletion(log_dir: Path, partition_dir: Path) -> Path | None:
    """Renames ``partition_dir`` (in ``log_dir``) to its ``-delete`` name and makes the rename
    durable; returns the new path, or None when there is no such dir. From then on nothing
    serves or adopts it, and the next start-up removes it if it is still there. Raises
    OSError (callers guard it)."""
    try:
        tp = TopicPartition.parse_dir_name(partition_dir.name)
    except ValueError:
        return None
    target = log_dir / delete_dir_name(tp)
    try:
        partition_dir.rename(target)
    except FileNotFoundError:
        return None
    fsync_dir(log_dir)
    return target


def _remove_tree(path: Path) -> None:
    for child in path.iterdir():
        if child.is_dir():
            _remove_tree(child)
        else:
            child.unlink(missing_ok=True)
    path.rmdir()
