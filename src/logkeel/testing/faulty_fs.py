"""A FUSE passthrough filesystem that fails or slows down on demand: a bad disk for real.

``FaultyFs(source, mountpoint)`` mounts ``source`` at ``mountpoint`` through a child process
(libfuse 3 through mfusepy; Debian's ``fuse3`` for ``fusermount3``) and passes every operation
through, until told otherwise:

    with FaultyFs(tmp / "backing", tmp / "mnt") as fs:
        ... start a broker with its log dir under tmp / "mnt" ...
        fs.fail(errno.EIO, ops={"write", "fsync"})   # the disk starts failing writes
        fs.delay(0.5, ops={"read"})                  # or reads take half a second
        fs.heal()                                    # back to normal

Faults apply to the operations named (``read``, ``write``, ``fsync``, ``open``, ``create``,
``getattr``, ``readdir``, ``mkdir``, ``rename``, ``unlink``, ``rmdir``, ``truncate``; all when
``ops`` is None) on paths matching ``path_glob`` (relative to the mount, e.g. ``"*.log"``).
The child rereads its orders from a small JSON file whenever it changes, so an order is in
force for every operation that starts after the call returns.

Segment files (``.log``) are opened with ``direct_io`` so that reads reach the filesystem
(and its faults) instead of the page cache; other files (indexes) are not, because ``mmap`` of
a ``direct_io`` file fails with ENODEV on FUSE (checked on Debian's fuse3).

The mount is always undone by ``unmount()`` / leaving the ``with`` block (``fusermount3 -u``,
lazily if busy), so a failing test does not leave a mount behind. Root (or /dev/fuse access)
is needed; ``available()`` says whether this machine can mount.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self

__all__ = ["FaultyFs", "FaultyFsUnavailable", "available"]

_FUSERMOUNT = "fusermount3"
_ALL_OPS = frozenset(
    {
        "read",
        "write",
        "fsync",
        "open",
        "create",
        "getattr",
        "readdir",
        "mkdir",
        "rename",
        "unlink",
        "rmdir",
        "truncate",
    }
)


class FaultyFsUnavailable(RuntimeError):
    """FUSE cannot be mounted here (no /dev/fuse, no fusermount3, no mfusepy, or the mount
    did not appear)."""


def available() -> str | None:
    """None when a FaultyFs can be mounted here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which(_FUSERMOUNT) is None:
        return f"no {_FUSERMOUNT} (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401 - only whether it imports
    except (ImportError, OSError) as exc:
        return f"mfusepy is not usable: {exc}"
    return None


class FaultyFs:
    """The parent's handle on one mount: orders faults, and unmounts."""

    def __init__(self, source: Path, mountpoint: Path, *, timeout: float = 10.0) -> None:
        self.source = Path(source).absolute()
        self.mountpoint = Path(mountpoint).absolute()
        self.control = self.mountpoint.parent / f".{self.mountpoint.name}.faults.json"
        self._timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None

    # -- orders ---------------------------------------------------------------------------------
    def fail(
        self, code: int = errno.EIO, *, ops: Iterable[str] | None = None, path_glob: str = "*"
    ) -> None:
        """Matching operations fail with ``code`` (an errno) from now on."""
        self._order({"error": code, "delay": 0.0, "ops": _ops(ops), "glob": path_glob})

    def delay(
        self, seconds: float, *, ops: Iterable[str] | None = None, path_glob: str = "*"
    ) -> None:
        """Matching operations take ``seconds`` longer from now on."""
        self._order({"error": 0, "delay": seconds, "ops": _ops(ops), "glob": path_glob})

    def heal(self) -> None:
        self._order({"error": 0, "delay": 0.0, "ops": [], "glob": "*"})

    def _order(self, order: dict[str, Any]) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(json.dumps(order))
        os.replace(tmp, self.control)
        # The child checks the file's mtime; make sure the next check sees a new one.
        time.sleep(0.02)

    # -- mount ----------------------------------------------------------------------------------
    def mount(self) -> Self:
        problem = available()
        if problem is not None:
            raise FaultyFsUnavailable(problem)
        self.source.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.heal()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "logkeel.testing.faulty_fs",
                str(self.source),
                str(self.mountpoint),
                str(self.control),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if os.path.ismount(self.mountpoint):
                return self
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                self._proc = None
                raise FaultyFsUnavailable(f"the FUSE process exited: {err[-2000:]}")
            time.sleep(0.02)
        self.unmount()
        raise FaultyFsUnavailable(f"{self.mountpoint} was not mounted within {self._timeout}s")

    def unmount(self) -> None:
        """Undoes the mount whatever state it is in; safe to call twice."""
        with contextlib.suppress(OSError):
            self.heal()
        if os.path.ismount(self.mountpoint):
            done = subprocess.run([_FUSERMOUNT, "-u", str(self.mountpoint)], capture_output=True)
            if done.returncode != 0:  # busy (a file still open): detach now, free later
                subprocess.run([_FUSERMOUNT, "-u", "-z", str(self.mountpoint)], capture_output=True)
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.wait(self._timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()

    def __enter__(self) -> Self:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()


def _ops(ops: Iterable[str] | None) -> list[str]:
    chosen = set(ops) if ops is not None else set(_ALL_OPS)
    unknown = chosen - _ALL_OPS
    if unknown:
        raise ValueError(f"unknown operations {sorted(unknown)}; known: {sorted(_ALL_OPS)}")
    return sorted(chosen)


# -- the child: the filesystem itself ------------------------------------------------------------


def _serve(source: str, mountpoint: str, control: str) -> None:
    import mfusepy

    class Orders:
        """The parent's current orders, reread when the control file changes."""

        def __init__(self) -> None:
            self._mtime = -1
            self._lock = threading.Lock()
            self.order: dict[str, Any] = {"error": 0, "delay": 0.0, "ops": [], "glob": "*"}

        def check(self, op: str, path: str) -> None:
            try:
                mtime = os.stat(control).st_mtime_ns
            except OSError:
                mtime = self._mtime
            with self._lock:
                if mtime != self._mtime:
                    with contextlib.suppress(OSError, ValueError):
                        self.order = json.loads(Path(control).read_text())
                        self._mtime = mtime
                order = self.order
            if op not in order["ops"] or not fnmatch.fnmatch(path.lstrip("/"), order["glob"]):
                return
            if order["delay"]:
                time.sleep(order["delay"])
            if order["error"]:
                raise mfusepy.FuseOSError(order["error"])

    orders = Orders()

    def real(path: str) -> str:
        return os.path.join(source, path.lstrip("/"))

    def passthrough(fn: Any) -> Any:
        """OSErrors of the real filesystem become the same errno for the caller."""

        def run(*args: Any) -> Any:
            try:
                return fn(*args)
            except mfusepy.FuseOSError:
                raise
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from exc

        return run

    class Passthrough(mfusepy.Operations):  # type: ignore[misc]  # mfusepy has no types
        use_ns = True

        @passthrough
        def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
            orders.check("getattr", path)
            st = os.lstat(real(path))
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
            attrs: dict[str, Any] = {k: getattr(st, k) for k in keys}
            attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return attrs

        @passthrough
        def readdir(self, path: str, fh: Any) -> list[str]:
            orders.check("readdir", path)
            return [".", "..", *os.listdir(real(path))]

        @passthrough
        def open(self, path: str, fi: Any) -> int:
            orders.check("open", path)
            fi.fh = os.open(real(path), fi.flags)
            fi.direct_io = path.endswith(".log")
            return 0

        @passthrough
        def create(self, path: str, mode: int, fi: Any = None) -> int:
            orders.check("create", path)
            fi.fh = os.open(real(path), fi.flags | os.O_CREAT, mode)
            fi.direct_io = path.endswith(".log")
            return 0

        @passthrough
        def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
            orders.check("read", path)
            return os.pread(fi.fh, size, offset)

        @passthrough
        def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
            orders.check("write", path)
            return os.pwrite(fi.fh, data, offset)

        @passthrough
        def truncate(self, path: str, length: int, fh: Any = None) -> int:
            orders.check("truncate", path)
            os.truncate(real(path), length)
            return 0

        @passthrough
        def fsync(self, path: str, datasync: int, fi: Any) -> int:
            orders.check("fsync", path)
            (os.fdatasync if datasync else os.fsync)(fi.fh)
            return 0

        @passthrough
        def fsyncdir(self, path: str, datasync: int, fi: Any) -> int:
            orders.check("fsync", path)
            return 0

        def flush(self, path: str, fi: Any) -> int:
            return 0

        @passthrough
        def release(self, path: str, fi: Any) -> int:
            os.close(fi.fh)
            return 0

        @passthrough
        def mkdir(self, path: str, mode: int) -> int:
            orders.check("mkdir", path)
            os.mkdir(real(path), mode)
            return 0

        @passthrough
        def rmdir(self, path: str) -> int:
            orders.check("rmdir", path)
            os.rmdir(real(path))
            return 0

        @passthrough
        def unlink(self, path: str) -> int:
            orders.check("unlink", path)
            os.unlink(real(path))
            return 0

        @passthrough
        def rename(self, old: str, new: str) -> int:
            orders.check("rename", old)
            os.rename(real(old), real(new))
            return 0

        @passthrough
        def chmod(self, path: str, mode: int) -> int:
            os.chmod(real(path), mode)
            return 0

        @passthrough
        def utimens(self, path: str, times: Any = None) -> int:
            os.utime(real(path), ns=times) if times else os.utime(real(path))
            return 0

        @passthrough
        def statfs(self, path: str) -> dict[str, Any]:
            st = os.statvfs(real(path))
            keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files")
            return {k: getattr(st, k) for k in (*keys, "f_ffree", "f_favail", "f_namemax")}

    # allow_other: FUSE lets only processes with the mounter's uid *and* gid in otherwise, and
    # the tests' brokers run in groups of their own (iptables cuts tell them apart by group).
    # Root may set it; a non-root mounter needs user_allow_other in /etc/fuse.conf.
    mfusepy.FUSE(Passthrough(), mountpoint, foreground=True, raw_fi=True, nothreads=False,
                 allow_other=os.geteuid() == 0)  # fmt: skip


if __name__ == "__main__":
    _serve(*sys.argv[1:4])
