"""Kafka's own Java client and tools for the tests: tests/clients/java/ compiled once, run per call.

`ContractClient.java` implements the command line shared by every client family (`produce`,
`consume`, one JSON object as the last stdout line) and the quota admin calls; `ShareClient.java`
the contract's `consume` as a share group member (`share_program`), `StreamsClient.java` a Kafka
Streams application (`streams_program`). javac compiles it
against the Kafka pom's jars (tests/jvm/kafka, `jvm.jars("kafka")`) into the JVM cache, in a folder
named by a hash of the sources and of that jar folder, under a file lock, so pytest-xdist workers
and worktrees sharing `KQP_JVM_CACHE` compile each version once. `run_tool` runs Kafka's own
command-line classes (`org.apache.kafka.tools.ProducerPerformance`, ...) on the same class path.
Without a JDK or Maven the calling test is skipped, and fails under CI=true, as the Kafka upstream is.

Beyond the shared fields, `produce` reports `offer_start`/`offer_end` (the offer starts once the
topic's metadata is known) and `consume` `consume_start`/`consume_end`, in time.monotonic()'s clock
(the JVM's System.nanoTime reads the same CLOCK_MONOTONIC), so a test can cut the wire taps' records
where the offer stopped; both report `responses`, the responses the client read (its throttle
average is over these).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from upstreams import jvm

from .client_programs import ClientProgram

SOURCES = Path(__file__).resolve().parents[1] / "clients" / "java"
MAIN = "ContractClient"
SHARE_MAIN, STREAMS_MAIN = "ShareClient", "StreamsClient"
LOG4J = SOURCES / "log4j2.properties"
# A short-lived client on a shared 2-core machine: the C1 compiler alone starts fastest, and the
# serial collector spends no threads of its own.
JVM_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xms64m", "-Xmx512m",
               "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={LOG4J}"]
EXIT_MARGIN = 90.0     # past a run's own time limit: the 60 s acknowledgement wait, JVM start and close

Json = dict[str, Any]


@functools.cache
def classes() -> Path:
    """The folder of compiled classes, compiling the sources the first time (skips without a JDK)."""
    try:
        jars = jvm.jars("kafka")
        javac = jvm.javac()
        jvm.java()
    except jvm.JvmMissing as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"Kafka's Java client cannot run here: {exc}")
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256(jars.name.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    folder = jvm.CACHE / f"java-clients-{digest.hexdigest()[:12]}"
    if (folder / ".complete").exists():
        return folder
    jvm.CACHE.mkdir(parents=True, exist_ok=True)
    with (jvm.CACHE / "java-clients.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another worker may be compiling the same sources
        if (folder / ".complete").exists():
            return folder
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        done = subprocess.run([javac, "-Xlint:all", "-d", str(partial), "-cp", str(jars / "*"),
                               *map(str, sources)], capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"javac failed on {SOURCES}:\n{done.stdout}{done.stderr}")
        (partial / ".complete").touch()
        partial.rename(folder)
    return folder


def java_command(main: str, *args: str, jvm_options: Sequence[str] = ()) -> list[str]:
    """argv running class `main` with Kafka's jars and the compiled clients on the class path
    (`jvm_options`: system properties a client reads, `-Dname=value`)."""
    return [jvm.java(), *JVM_OPTIONS, *jvm_options, "-cp", jvm.classpath("kafka", classes()), main, *args]


def share_program() -> ClientProgram:
    """`ShareClient`: the contract's `consume` in a share group (KIP-932), with its acknowledgement options."""
    return ClientProgram("java-share", tuple(java_command(SHARE_MAIN)))


def streams_program() -> ClientProgram:
    """`StreamsClient`: `streams BOOTSTRAP INPUT OUTPUT APPLICATION_ID streams|classic STOP_FILE TIMEOUT`."""
    return ClientProgram("java-streams", tuple(java_command(STREAMS_MAIN)))


def run_tool(main: str, *args: str, timeout: float = 120.0,
             jvm_options: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """One of Kafka's command-line tools (`org.apache.kafka.tools.ConfigCommand`, ...) to completion."""
    return subprocess.run(java_command(main, *args, jvm_options=jvm_options), capture_output=True, text=True,
                          timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def _conf_args(conf: Mapping[str, object] | None) -> list[str]:
    return [arg for key, value in (conf or {}).items() for arg in ("--conf", f"{key}={value}")]


def _run(args: Sequence[str], timeout: float, jvm_options: Sequence[str] = ()) -> Json:
    done = run_tool(MAIN, *args, timeout=timeout, jvm_options=jvm_options)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{MAIN} {' '.join(args[:1])} exited with {done.returncode}:\n"
                           f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
    result: Json = json.loads(lines[-1])
    return result


def produce(bootstrap: str, topic: str, client_id: str, seconds: float, *, record_bytes: int = 1000,
            batch_bytes: int = 16384, linger_ms: int = 5, acks: str = "all", compression: str = "none",
            max_records: int | None = None, idempotent: bool = False,
            conf: Mapping[str, object] | None = None, jvm_options: Sequence[str] = ()) -> Json:
    """Produce for `seconds` (or `max_records`), then wait for every acknowledgement: the run's JSON."""
    args = ["produce", bootstrap, topic, client_id, str(seconds), "--record-bytes", str(record_bytes),
            "--batch-bytes", str(batch_bytes), "--linger-ms", str(linger_ms), "--acks", acks,
            "--compression", compression, *_conf_args(conf)]
    if max_records is not None:
        args += ["--max-records", str(max_records)]
    if idempotent:
        args.append("--idempotent")
    return _run(args, seconds + EXIT_MARGIN, jvm_options)


def consume(bootstrap: str, topic: str, client_id: str, group: str, count: int, timeout: float, *,
            conf: Mapping[str, object] | None = None) -> Json:
    """Consume in `group` from the earliest offset until `count` records or `timeout` s: the run's JSON."""
    return _run(["consume", bootstrap, topic, client_id, group, str(count), str(timeout), *_conf_args(conf)],
                timeout + EXIT_MARGIN)


def admin_alter(bootstrap: str, entity: Mapping[str, str | None], ops: Mapping[str, float | None], *,
                validate_only: bool = False, conf: Mapping[str, object] | None = None) -> Json:
    """Admin.alterClientQuotas for one entity (a None name: the default entity; a None value removes
    the key): {"ok": bool, "errors": [...]}."""
    args = ["admin-alter", bootstrap, json.dumps(entity), json.dumps(ops), *_conf_args(conf)]
    if validate_only:
        args.append("--validate-only")
    return _run(args, EXIT_MARGIN)


def admin_describe(bootstrap: str, components: Mapping[str, str | None], *, strict: bool = False,
                   conf: Mapping[str, object] | None = None) -> Json:
    """Admin.describeClientQuotas: `components` maps an entity type to a name, None (the default
    entity) or "*" (any); empty: every entity. {"entries": [{"entity": {...}, "values": {...}}]}."""
    args = ["admin-describe", bootstrap, json.dumps(components), *_conf_args(conf)]
    if strict:
        args.append("--strict")
    return _run(args, EXIT_MARGIN)


def throttle_total_ms(run: Json) -> float | None:
    """The throttle time a run's client was told in all: its average over every response it read,
    times their count (ContractClient's metrics keep one sample for the whole run; Kafka's tools keep
    their default two 30 s samples, which span a shorter run whole)."""
    if run.get("throttle_ms_avg") is None or not run.get("responses"):
        return None
    return float(run["throttle_ms_avg"]) * int(run["responses"])
