"""A checker in the spirit of Jepsen for a run against a cluster: what producers were told
(acknowledgements) against what consumers read back.

Pure: a run records into a ``History`` and ``check`` returns the anomalies, so that a test (or
a soak) prints them. The properties:

- no acknowledged write lost: every acked value is read, at the offset its ack named;
- no duplicates: a value is read at one offset only (idempotent producers);
- per-partition order: one producer's acked values sit at increasing offsets in send order;
- nothing read above the high watermark: every value read is in the final log at the offset it
  was read at (a read of a record a new leader later truncated shows up as a mismatch);
- losses an unclean election reported (``reported_truncations``: partition -> offset from which
  the log was cut) excuse the acked writes at or above that offset, and only those.

An ack may carry no offset: librdkafka's idempotent producer reports a batch whose request timed
out as delivered, offset unknown, once a later batch of the same partition is acknowledged (the
broker takes a producer's batches in sequence order, so the earlier one is in the log). Such a
write must be in the final log once; its offset there takes its place in the order check, and a
reported cut excuses it only when a write sent before it was cut too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["History"]


@dataclass
class History:
    # (partition, value) -> (send sequence, acked offset; None: acknowledged without one)
    acked: dict[tuple[int, str], tuple[int, int | None]] = field(default_factory=dict)
    # partition -> [(offset, value)] as consumers saw them during the run
    reads: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    failed_sends: int = 0

    def ack(self, partition: int, value: str, seq: int, offset: int | None) -> None:
        self.acked[(partition, value)] = (seq, offset)

    def read(self, partition: int, offset: int, value: str) -> None:
        self.reads.setdefault(partition, []).append((offset, value))

    def check(
        self,
        final_log: Mapping[int, Iterable[tuple[int, str]]],
        reported_truncations: Mapping[int, int] | None = None,
    ) -> list[str]:
        """The anomalies of the run; ``final_log`` is each partition read from the start to its
        end once the run is over."""
        cuts = reported_truncations or {}
        anomalies: list[str] = []
        final: dict[int, dict[int, str]] = {}
        for partition, records in final_log.items():
            at: dict[int, str] = {}
            seen: dict[str, int] = {}
            last = -1
            for offset, value in records:
                if offset <= last:
                    anomalies.append(f"p{partition}: offset {offset} read after {last}")
                last = offset
                if value in seen:
                    anomalies.append(
                        f"p{partition}: {value!r} duplicated at {seen[value]} and {offset}"
                    )
                seen[value] = offset
                at[offset] = value
            final[partition] = at
        where = {
            (partition, value): offset
            for partition, at in final.items()
            for offset, value in at.items()
        }
        # The earliest send of each partition whose acked offset a reported cut excuses.
        first_cut: dict[int, int] = {}
        for (partition, _), (seq, acked_offset) in self.acked.items():
            if acked_offset is not None and partition in cuts and acked_offset >= cuts[partition]:
                first_cut[partition] = min(seq, first_cut.get(partition, seq))
        by_partition: dict[int, list[tuple[int, int, str]]] = {}
        for (partition, value), (seq, acked_at) in self.acked.items():
            at_offset = where.get((partition, value)) if acked_at is None else acked_at
            if at_offset is None:  # acknowledged without an offset, and not in the final log
                if not first_cut.get(partition, seq) < seq:
                    anomalies.append(f"p{partition}: acked {value!r} (offset not told) lost")
                continue
            by_partition.setdefault(partition, []).append((seq, at_offset, value))
            got = final.get(partition, {}).get(at_offset)
            if got == value:
                continue
            if partition in cuts and at_offset >= cuts[partition]:
                continue  # lost to an unclean election that said so
            anomalies.append(
                f"p{partition}: acked {value!r} at {at_offset} lost"
                + ("" if got is None else f" (offset holds {got!r})")
            )
        for partition, sends in by_partition.items():
            sends.sort()
            for (_, o1, v1), (_, o2, v2) in zip(sends, sends[1:], strict=False):
                if o2 <= o1:
                    anomalies.append(
                        f"p{partition}: {v2!r} sent after {v1!r} but acked at {o2} <= {o1}"
                    )
        for partition, reads in self.reads.items():
            log = final.get(partition, {})
            for offset, value in reads:
                if log.get(offset) != value and not (
                    partition in cuts and offset >= cuts[partition]
                ):
                    anomalies.append(
                        f"p{partition}: read {value!r} at {offset}, not in the final log "
                        "(read above the high watermark?)"
                    )
        return anomalies
