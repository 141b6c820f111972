"""Share group members (KIP-932) for the tests: Kafka's KafkaShareConsumer as a group, watched as it reads.

`load` writes keyed records straight to the upstream (keys `k-<n>`, as the contract's producers
write them); `start_members` starts `n` members of one share group (tests/clients/java/ShareClient.java,
each appending the keys it accepts to a file of its own); `wait_for_keys` reads those files until
the group has accepted every expected key, then tells the members to stop, so the members need not
know each other's progress. Every wait is bounded, and a member left running is killed at the end
of its `with` block.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from .client_programs import Running
from .java_clients import share_program

EXIT_SLACK = 60.0   # a member's JVM start, its group leave and close, past its own timeout


@dataclass
class Member:
    running: Running
    keys_file: Path

    def keys(self) -> list[str]:
        """The keys this member has accepted so far, in order."""
        if not self.keys_file.exists():
            return []
        return [line.split()[0] for line in self.keys_file.read_text().splitlines() if line.strip()]


def load(bootstrap: str, topic: str, count: int, value_bytes: int = 1000) -> list[str]:
    """`count` records keyed `k-0`.. of `value_bytes` each, straight to the upstream, in the Java
    client's 16 KB batches; their keys."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "kqp-test-share-load", "linger.ms": 5,
                         "batch.size": 16384, "log_level": 3})
    value = b"x" * value_bytes
    keys = [f"k-{i}" for i in range(count)]
    for key in keys:
        while True:
            try:
                producer.produce(topic, value, key.encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0, f"loading {topic} did not finish"
    return keys


@contextlib.contextmanager
def start_members(bootstrap: str, topic: str, client_id: str, group: str, n: int, folder: Path, timeout: float,
                  *, conf: dict[str, Any] | None = None, **options: Any) -> Iterator[list[Member]]:
    """`n` members of share group `group` reading `topic` through `bootstrap` until `wait_for_keys`
    stops them or `timeout`; `options` are ShareClient's (release_first=True, reject_every=10, commit="fetch")."""
    folder.mkdir(parents=True, exist_ok=True)
    stop = folder / "stop"
    stop.unlink(missing_ok=True)
    program = share_program()
    with contextlib.ExitStack() as stack:
        members = []
        for index in range(n):
            keys_file = folder / f"keys-{index}"
            running = stack.enter_context(program.start(
                "consume", bootstrap, topic, client_id, group, 10**9, timeout, stop_file=stop, keys_file=keys_file,
                conf=conf, timeout=timeout + EXIT_SLACK, **options))
            members.append(Member(running, keys_file))
        yield members


def wait_for_keys(members: Sequence[Member], expected: int, timeout: float) -> Counter[str]:
    """Every key the members accepted, counted, once `expected` distinct keys are in (or `timeout`
    passes); then the members are told to stop."""
    deadline = time.monotonic() + timeout
    while True:
        accepted = Counter(key for member in members for key in member.keys())
        if len(accepted) >= expected or time.monotonic() > deadline or all(m.running.done() for m in members):
            break
        time.sleep(0.5)
    (members[0].keys_file.parent / "stop").touch()
    return accepted


def reports(members: Sequence[Member]) -> list[dict[str, Any]]:
    """Each member's JSON report, once it has stopped."""
    return [member.running.result() for member in members]
