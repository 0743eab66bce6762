"""Client quotas with real producers: a throttled producer's rate against its quota, and an
unthrottled producer's rate alone and beside the throttled one.

    .venv/bin/python bench/quotas.py                 # quota 1 MiB/s, 33 s beside (3 windows)
    .venv/bin/python bench/quotas.py --quick         # 11 s beside (one window)

One `logkeel serve` (defaults: quota.window.num 11, quota.window.size.seconds 1). Two
confluent-kafka producers (1 KiB records, linger.ms 5, batch.size 16384, acks=1) send as fast
as they may to one topic: client id `fast` first alone, then `fast` beside `slow`, which has
`producer_byte_rate` set on /clients/slow. Rates are bytes acknowledged per second.

The last line printed is one JSON object:
  {"settings": {...}, "quota_bytes_per_s": q, "slow_first_window_bytes_per_s": r,
   "slow_whole_run_bytes_per_s": r, "slow_windows_bytes_per_s": [...], "slow_ratio_to_quota": x,
   "fast_alone_bytes_per_s": r, "fast_beside_bytes_per_s": r, "fast_ratio_beside_to_alone": x}
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from kio.schema.alter_client_quotas.v1 import request as alter
from kio.static.primitive import f64

from logkeel.cli.broker_requests import send
from logkeel.testing.broker_process import LogkeelBroker
from logkeel.testing.rate_clients import Producing

WINDOW_S = 11.0


def _set_quota(bootstrap: str, client_id: str, rate: int) -> None:
    answer = send(bootstrap, alter.AlterClientQuotasRequest(
        entries=(alter.EntryData(
            entity=(alter.EntityData(entity_type="client-id", entity_name=client_id),),
            ops=(alter.OpData(key="producer_byte_rate", value=f64(float(rate)), remove=False),),
        ),),
        validate_only=False,
    ), client_id="bench")  # fmt: skip
    assert answer.entries[0].error_code == 0, answer


def _run(producers: list[Producing], seconds: float) -> None:
    for p in producers:
        p.thread.start()
    time.sleep(seconds)
    for p in producers:
        p.stop.set()
    for p in producers:
        p.thread.join(60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--quota", type=int, default=1024 * 1024)
    args = parser.parse_args()
    beside_s = WINDOW_S if args.quick else 3 * WINDOW_S
    alone_s = WINDOW_S
    with tempfile.TemporaryDirectory() as tmp, LogkeelBroker(Path(tmp) / "broker") as broker:
        _set_quota(broker.bootstrap, "slow", args.quota)
        warm = Producing(broker.bootstrap, "warm", "quotas")  # creates the topic
        _run([warm], 2.0)
        alone = Producing(broker.bootstrap, "fast", "quotas")
        _run([alone], alone_s)
        slow = Producing(broker.bootstrap, "slow", "quotas")
        fast = Producing(broker.bootstrap, "fast", "quotas")
        _run([slow, fast], beside_s + 0.5)
    windows = [
        slow.bytes_between(i * WINDOW_S, (i + 1) * WINDOW_S) / WINDOW_S
        for i in range(int(beside_s // WINDOW_S))
    ]
    fast_alone = alone.bytes_by(alone_s) / alone_s
    fast_beside = fast.bytes_by(beside_s) / beside_s
    whole = slow.bytes_by(beside_s) / beside_s
    print(json.dumps({
        "settings": {"quota.window.num": 11, "quota.window.size.seconds": 1,
                     "beside_s": beside_s, "alone_s": alone_s, "record_bytes": 1024},
        "quota_bytes_per_s": args.quota,
        "slow_first_window_bytes_per_s": round(windows[0]),
        "slow_whole_run_bytes_per_s": round(whole),
        "slow_windows_bytes_per_s": [round(w) for w in windows],
        "slow_ratio_to_quota": round(statistics.median(windows) / args.quota, 3),
        "slow_whole_run_ratio_to_quota": round(whole / args.quota, 3),
        "fast_alone_bytes_per_s": round(fast_alone),
        "fast_beside_bytes_per_s": round(fast_beside),
        "fast_ratio_beside_to_alone": round(fast_beside / fast_alone, 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
