"""Replication between brokers over SASL_SSL against PLAINTEXT, in one run: acks=all produce
throughput to RF 3 (min.insync.replicas 2) on two 3-broker clusters that differ only in their
inter-broker listener (PLAINTEXT, or SASL_SSL with PLAIN and TLS 1.3).

    .venv/bin/python bench/inter_broker_tls.py            # 100k x 1 KiB per run, 5 repeats
    .venv/bin/python bench/inter_broker_tls.py --quick    # 30k, 3 repeats

Both clusters run on one real ZooKeeper (two chroots) and stay up for the whole run; clients use
each broker's PLAINTEXT listener, so only the followers' fetches (and the leaders' answers,
which cannot use sendfile under TLS) differ. The clusters take turns, the first alternating
between repeats. The last line printed is one JSON object; the ratio is the median of the
per-repeat SASL_SSL / PLAINTEXT ratios.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient

from logkeel.cluster.zk_server import ZooKeeperServer
from logkeel.testing.broker_process import LogkeelBroker, free_port
from logkeel.testing.certs import Certificates, make_certificates
from replication import MESSAGE, SESSION_TIMEOUT_MS, create, produce
from tls import run_args

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";')  # fmt: skip


def internal_listener(protocol: str, certs: Certificates) -> dict[str, str]:
    if protocol == "PLAINTEXT":
        return {"listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT"}
    return {
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
    }


def start_cluster(
    work: Path, connect: str, protocol: str, certs: Certificates
) -> list[LogkeelBroker]:
    brokers = []
    for i in (1, 2, 3):
        port = free_port()
        brokers.append(LogkeelBroker(
            work / f"b{i}", port=port, extra_args=["--node-id", str(i)],
            overrides={
                "zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "listeners": f"CLIENT://127.0.0.1:{port},INTERNAL://127.0.0.1:{free_port()}",
                "inter.broker.listener.name": "INTERNAL",
                **internal_listener(protocol, certs),
            },
        ))  # fmt: skip
    threads = [threading.Thread(target=b.start, args=(60,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return brokers


def main() -> None:
    args = run_args(__doc__, 30_000)
    work = Path(tempfile.mkdtemp(prefix="logkeel-bench-inter-broker-"))
    certs = make_certificates(work / "certs")
    protocols = ("PLAINTEXT", "SASL_SSL")
    runs: dict[str, list[float]] = {p: [] for p in protocols}
    clusters: dict[str, list[LogkeelBroker]] = {}
    with ZooKeeperServer(work / "zk") as zk:
        try:
            for p in protocols:
                clusters[p] = start_cluster(work / p, f"{zk.connect_string}/{p.lower()}", p, certs)
            bootstrap = {p: ",".join(b.bootstrap for b in bs) for p, bs in clusters.items()}
            admins = {p: AdminClient({"bootstrap.servers": bootstrap[p]}) for p in protocols}
            for repeat in range(args.repeats):
                for p in protocols if repeat % 2 == 0 else protocols[::-1]:
                    topic = f"ib-{uuid.uuid4().hex[:8]}"
                    create(admins[p], topic, 3, **{"min.insync.replicas": "2"})
                    runs[p].append(produce(bootstrap[p], topic, args.messages, "all"))
                    admins[p].delete_topics([topic])[topic].result(30)
                print(f"repeat {repeat}: " + ", ".join(f"{p} {runs[p][-1]:.0f} MB/s" for p in protocols),
                      flush=True)  # fmt: skip
        finally:
            for brokers in clusters.values():
                for b in brokers:
                    if b.alive():
                        b.stop()
    shutil.rmtree(work, ignore_errors=True)
    ratios = [s / p for s, p in zip(runs["SASL_SSL"], runs["PLAINTEXT"], strict=True)]
    result: dict[str, Any] = {
        "settings": {**vars(args), "message_bytes": MESSAGE, "tls": "TLSv1.3", "sasl": "PLAIN",
                     "librdkafka": confluent_kafka.libversion()[0]},
        "rf3_acks_all_mb_s": {p: {"median": round(statistics.median(v), 1), "runs": v}
                              for p, v in runs.items()},
        "ratio_sasl_ssl_median": round(statistics.median(ratios), 2),
    }  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
