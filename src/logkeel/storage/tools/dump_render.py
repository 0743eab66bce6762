"""Rendering of ``FileDump``s: Kafka DumpLogSegments-style text lines, or one JSON document,
both streamed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from logkeel.storage.tools.dump_result import (
    FileDump,
    FileKind,
    Json,
)

_LINE_ESCAPES = str.maketrans({"\t": "\\t", "\n": "\\n", "\r": "\\r"})


# ---- rendering -----------------------------------------------------------------------------


def _optional_long(value: int | None) -> str:
    # How Java prints an OptionalLong, which is what Kafka's tool shows.
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _text(value: str | None, encoding: str | None) -> str:
    if value is None:
        return "null"
    if encoding == "base64":
        return f"base64:{value}"
    # One record per line: the only control characters a text value may hold are these.
    return value.translate(_LINE_ESCAPES)


def _batch_line(b: Json) -> str:
    return (
        f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['records']} "
        f"baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} "
        f"producerId: {b['producer_id']} producerEpoch: {b['producer_epoch']} "
        f"partitionLeaderEpoch: {b['partition_leader_epoch']} "
        f"isTransactional: {_bool(b['is_transactional'])} isControl: {_bool(b['is_control'])} "
        f"deleteHorizonMs: {_optional_long(b['delete_horizon_ms'])} position: {b['position']} "
        f"{b['timestamp_type']}: {b['max_timestamp']} size: {b['size']} magic: {b['magic']} "
        f"compresscodec: {b['compression']} crc: {b['crc']} isvalid: {_bool(b['crc_valid'])}"
    )


def _record_line(r: Json, timestamp_type: str) -> str:
    parts = [
        f"| offset: {r['offset']} {timestamp_type}: {r['timestamp']} keySize: {r['key_size']} "
        f"valueSize: {r['value_size']} sequence: {r['sequence']} "
        f"headerKeys: [{','.join(h['key'] for h in r['headers'])}]"
    ]
    control = r.get("control")
    if control is not None:
        if "coordinator_epoch" in control:
            parts.append(
                f"endTxnMarker: {control['type']} coordinatorEpoch: {control['coordinator_epoch']}"
            )
        else:
            parts.append(f"controlType: {control['type']}({control['type_id']})")
    else:
        if r["key"] is not None:
            parts.append(f"key: {_text(r['key'], r['key_encoding'])}")
        if r["value"] is not None:
            parts.append(f"payload: {_text(r['value'], r['value_encoding'])}")
        if r["headers"]:
            rendered = ",".join(
                f"{h['key']}={_text(h['value'], h['value_encoding'])}" for h in r["headers"]
            )
            parts.append(f"headers: [{rendered}]")
    return " ".join(parts)


def _bool(value: bool | None) -> str:
    return "true" if value else "false"


def _item_lines(kind: FileKind, item: Json) -> Iterator[str]:
    if kind == FileKind.LOG:
        yield _batch_line(item)
        for record in item.get("data", ()):
            yield _record_line(record, item["timestamp_type"])
    elif kind == FileKind.OFFSET_INDEX:
        yield f"offset: {item['offset']} position: {item['position']}"
    elif kind == FileKind.TIME_INDEX:
        yield f"timestamp: {item['timestamp']} offset: {item['offset']}"
    elif kind == FileKind.TXN_INDEX:
        yield (
            f"version: {item['version']} producerId: {item['producer_id']} "
            f"firstOffset: {item['first_offset']} lastOffset: {item['last_offset']} "
            f"lastStableOffset: {item['last_stable_offset']}"
        )
    else:
        yield (
            f"producerId: {item['producer_id']} producerEpoch: {item['producer_epoch']} "
            f"coordinatorEpoch: {item['coordinator_epoch']} "
            f"currentTxnFirstOffset: {_optional_long(item['current_txn_first_offset'])} "
            f"lastTimestamp: {item['last_timestamp']} firstSequence: {item['first_sequence']} "
            f"lastSequence: {item['last_sequence']} lastOffset: {item['last_offset']} "
            f"offsetDelta: {item['offset_delta']} timestamp: {item['last_timestamp']}"
        )


def render_text(dump: FileDump) -> Iterator[str]:
    """Kafka DumpLogSegments-style lines (without newlines) for one file, streamed.

    Problems are interleaved where they are found, each line starting with ``error:`` or
    ``mismatch:``.
    """
    yield f"Dumping {dump.file}"
    if dump.kind == FileKind.LOG and dump.head.get("base_offset") is not None:
        yield f"Log starting offset: {dump.head['base_offset']}"
    elif dump.kind == FileKind.PRODUCER_SNAPSHOT and dump.head.get("offset") is not None:
        yield f"Snapshot offset: {dump.head['offset']}"
    shown_errors = shown_mismatches = 0
    count = 0

    def new_problems() -> Iterator[str]:
        nonlocal shown_errors, shown_mismatches
        for e in dump.errors[shown_errors:]:
            yield f"error: {e['message']}"
        shown_errors = len(dump.errors)
        if dump.mismatches is not None:
            for m in dump.mismatches[shown_mismatches:]:
                yield f"mismatch: {m['message']}"
            shown_mismatches = len(dump.mismatches)

    for item in dump.items():
        count += 1
        yield from _item_lines(dump.kind, item)
        yield from new_problems()
    if count == 0 and dump.kind != FileKind.LOG:
        yield f"{dump.file} is empty."
    yield from new_problems()
    if dump.kind == FileKind.LOG and dump.tail.get("trailing_bytes"):
        yield f"Found {dump.tail['trailing_bytes']} invalid bytes at the end of {Path(dump.file).name}"
    if dump.mismatches is not None and not dump.mismatches and not dump.errors:
        yield f"{dump.file} passed verification against {dump.head.get('log_file')}."


def render_json(dumps: Iterable[FileDump], *, single: bool) -> Iterator[str]:
    """One JSON document, streamed in pieces: the file's document when ``single``, else
    ``{"files": [...]}``. Each batch or entry goes on its own line."""
    if not single:
        yield '{"files": [\n'
    for n, dump in enumerate(dumps):
        if n:
            yield ",\n"
        yield from _json_document(dump)
    if not single:
        yield "\n]}"
    yield "\n"


def _json_document(dump: FileDump) -> Iterator[str]:
    # Written by hand around the streamed items so that no list of them is ever built; every
    # value still goes through json.dumps.
    yield "{"
    yield f'"file": {json.dumps(dump.file)}, "kind": {json.dumps(str(dump.kind))}'
    for key, value in dump.head.items():
        yield f", {json.dumps(key)}: {json.dumps(value)}"
    yield f", {json.dumps(dump.items_key)}: ["
    for n, item in enumerate(dump.items()):
        yield ("\n" if n == 0 else ",\n") + json.dumps(item)
    yield "]"
    for key, value in dump.tail.items():
        yield f", {json.dumps(key)}: {json.dumps(value)}"
    yield f', "errors": {json.dumps(dump.errors)}'
    if dump.mismatches is not None:
        yield f', "mismatches": {json.dumps(dump.mismatches)}'
    yield "}"
