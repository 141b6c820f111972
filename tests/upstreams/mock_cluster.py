"""Run librdkafka's mock Kafka cluster until stdin closes or SIGTERM arrives.

Usage: python mock_cluster.py [BROKERS]   (default 3)

The mock cluster lives inside a librdkafka client handle, so it must be a process of its own:
the tests talk to it over real sockets exactly as to a broker. The first stdout line is the
bootstrap list "h:p,h:p,h:p" (one address per broker, in node id order); nothing else is printed
on stdout. librdkafka's own log lines go to stderr. Topics are auto-created on first Metadata or
Produce, with the mock's default of 4 partitions and replication factor min(3, brokers).
"""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Producer


def main(argv: list[str]) -> int:
    brokers = int(argv[1]) if len(argv) > 1 else 3
    # SIGTERM must end the process with 0 even while the main thread blocks in stdin.read().
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    handle = Producer({"test.mock.num.brokers": brokers, "bootstrap.servers": "unused:9092"})
    metadata = handle.list_topics(timeout=30)
    nodes = sorted(metadata.brokers.values(), key=lambda b: b.id)
    if len(nodes) != brokers:
        print(f"mock cluster reported {len(nodes)} brokers, wanted {brokers}", file=sys.stderr)
        return 1
    print(",".join(f"{b.host}:{b.port}" for b in nodes), flush=True)
    # The parent holds our stdin open for as long as it wants the cluster; EOF means "stop".
    sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
