"""How long a refused SCRAM-SHA-256 login takes, seen by the client, for a user that exists
(wrong password) and one that does not: a difference tells an attacker which users exist.

    .venv/bin/python bench/scram_refusal.py            # 200 attempts of each
    .venv/bin/python bench/scram_refusal.py --quick    # 60 of each

One `logkeel serve` with a PLAINTEXT listener (to create the user) and a SASL_PLAINTEXT one
with SCRAM-SHA-256 and `connection.failed.authentication.delay.ms=0` (the delay would hide the
difference behind 100 ms). Each attempt opens a connection, sends SaslHandshake and the
client-first message, and, when the broker answers with a server-first message, the
client-final one (the client's PBKDF2 included, as a real client's), until the refusal. The
two kinds of attempt alternate, the order flipping every pair (the first of a pair is slower).

The last line printed is one JSON object:
  {"settings": {...}, "known_user_ms": m, "unknown_user_ms": m, "ratio_unknown_to_known": r,
   "unknown_answered_at": "client-first" | "proof"}
Times are medians; the ratio is the median of per-pair ratios.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from logkeel.cluster.scram import ScramClientExchange
from logkeel.server.protocol import (
    ApiKey,
    decode_response,
    encode_request,
    request_schema,
    response_schema,
)
from logkeel.testing.broker_process import LogkeelBroker, free_port

MECHANISM = "SCRAM-SHA-256"


def _call(sock: socket.socket, api: ApiKey, version: int, **fields: Any) -> Any:
    request_type, response_type = request_schema(api, version), response_schema(api, version)
    assert request_type is not None and response_type is not None
    sock.sendall(encode_request(request_type(**fields), 1, "bench"))
    (size,) = struct.unpack(">i", _read(sock, 4))
    return decode_response(response_type, _read(sock, size))[1]


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def attempt(port: int, user: str) -> tuple[float, bool]:
    """(milliseconds to the refusal, whether the broker answered the client-first message)."""
    client = ScramClientExchange(MECHANISM, user, "not-the-password")
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        _call(sock, ApiKey.SASL_HANDSHAKE, 1, mechanism=MECHANISM)
        first = _call(sock, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.first())
        answered = first.error_code == 0
        if answered:
            final = _call(
                sock, ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client.step(first.auth_bytes)
            )
            assert final.error_code != 0, "the wrong password was accepted"
    return (time.perf_counter() - start) * 1000, answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    attempts = 60 if args.quick else 200
    plain, sasl = free_port(), free_port()
    broker = LogkeelBroker(
        Path(tempfile.mkdtemp(prefix="bench-scram-")),
        port=plain,
        overrides={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "sasl.enabled.mechanisms": MECHANISM,
            "connection.failed.authentication.delay.ms": "0",
        },
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        for f in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("alice", info, b"alice-secret")]
        ).values():
            f.result(30)
        known: list[float] = []
        unknown: list[float] = []
        unknown_answered = []
        for i in range(attempts):
            order = ("alice", "mallory") if i % 2 == 0 else ("mallory", "alice")
            for user in order:
                ms, answered = attempt(sasl, user)
                if user == "alice":
                    known.append(ms)
                else:
                    unknown.append(ms)
                    unknown_answered.append(answered)
        ratios = [u / k for u, k in zip(unknown, known, strict=True)]
        print(
            json.dumps(
                {
                    "settings": {"attempts": attempts, "mechanism": MECHANISM, "iterations": 4096},
                    "known_user_ms": round(statistics.median(known), 3),
                    "unknown_user_ms": round(statistics.median(unknown), 3),
                    "ratio_unknown_to_known": round(statistics.median(ratios), 3),
                    "unknown_answered_at": "proof" if all(unknown_answered) else "client-first",
                }
            )
        )
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
