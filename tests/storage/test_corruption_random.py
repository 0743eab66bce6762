"""Random bytes of random files are overwritten; the loader never raises, never serves a batch
whose CRC fails, and lazy loading ends where eager loading does."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from logkeel.records.batch import BatchHeader, crc_valid

from .startuputil import TP, copy, crash, fingerprint, load, scribble, settle, write_dir


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    root = tmp_path_factory.mktemp("templates")
    write_dir(root / "clean", rounds=30)
    m = write_dir(root / "crashed", rounds=30, shutdown=False)
    plog = m.get_log(TP)
    plog.flush(plog.log_end_offset - 40)
    m.checkpoint_all()
    crash(m)
    return root


def served_batches(m):
    """Every batch from log start to log end through the read path, CRC-checked."""
    plog = m.get_log(TP)
    offset, out = plog.log_start_offset, []
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).read_bytes()
        assert data, f"nothing served at {offset} below the log end {plog.log_end_offset}"
        pos = 0
        while pos < len(data):
            header = BatchHeader.parse(data, pos)
            assert crc_valid(data, pos), (
                f"served a batch at offset {header.base_offset} that fails its CRC"
            )
            assert header.base_offset >= offset or not out
            out.append(header.base_offset)
            offset = header.next_offset
            pos += header.size
    return out


damage = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.floats(0, 1, exclude_max=True),
        st.binary(min_size=1, max_size=16),
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=int(os.environ.get("LOGKEEL_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(which=st.sampled_from(["clean", "crashed"]), hits=damage)
# Cuts the active segment back to its base (a lazy start keeps it empty, an eager one drops it).
@example(which="clean", hits=[(479, 0.0, b"\x00" * 12), (4233, 0.015625, b"\x00")])
# An offset index entry inside a batch (it passes the sanity check) and a damaged txn index:
# its rebuild read from that hint, stopped, and lost two aborted transactions (lazy start).
@example(which="crashed", hits=[(155, 0.875, b"\x00\x01"), (168, 0.0, b"\x01")])
# ... and a marker damaged below the recovery point: its rebuild raised, the partition failed
# to load eagerly where a lazy start cut it at that marker.
@example(
    which="crashed",
    hits=[(155, 0.875, b"\x00\x01"), (168, 0.0, b"\x01"), (3415, 0.6813075979859815, b"(")],
)
def test_random_damage_never_raises_nor_serves_corrupt_data(
    templates, tmp_path_factory, which, hits
):
    work = tmp_path_factory.mktemp("work")
    files = sorted(p for p in (templates / which).rglob("*") if p.is_file() and p.name != ".lock")
    copies = {}
    for mode in ("lazy", "eager"):
        path = copy(templates / which, work / mode)
        for pick, where, data in hits:
            victim = path / files[pick % len(files)].relative_to(templates / which)
            size = victim.stat().st_size
            scribble(victim, int(where * max(size, 1)), data)
        copies[mode] = path
    lazy = load(copies["lazy"])
    settle(lazy)
    eager = load(copies["eager"], validation="eager")
    if TP in lazy.logs or TP in eager.logs:
        assert (TP in lazy.logs) == (TP in eager.logs)
        served = served_batches(lazy)
        assert served == served_batches(eager)
        a, b = (
            fingerprint(lazy.get_log(TP), indexes=False, empty_last_segment=False),
            fingerprint(eager.get_log(TP), indexes=False, empty_last_segment=False),
        )
        assert a == b
    for m in (lazy, eager):
        m.shutdown()
    shutil.rmtree(work)


def test_a_scribbled_log_dir_file_set_loads(templates, tmp_path):
    path = copy(templates / "clean", tmp_path / "d")
    for name in os.listdir(path):
        if (path / name).is_file() and name != ".lock":
            scribble(path / name, 0, b"\xff\x00garbage")
    m = load(path)
    assert TP in m.logs
    assert served_batches(m)
    m.shutdown()
