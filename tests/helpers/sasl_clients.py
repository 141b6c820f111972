"""Real clients logging in over SASL_PLAINTEXT, each in its own dialect, behind the same calls.

`sasl_settings(client, mechanism, user, password)` gives the options each client takes (librdkafka's
`sasl.*` properties for confluent-kafka and kcat, kafka-python's and aiokafka's `sasl_*` arguments);
`produce(client, bootstrap, topic, count, settings)` sends `count` messages and returns once every
one is acknowledged, or raises with what the client said (`LoginRefused` when it reports failed
authentication). Every call ends at a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from .kcat import run_kcat

CLIENTS_MECHANISMS = {
    "confluent-kafka": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "kcat": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "aiokafka": ("PLAIN", "SCRAM-SHA-256"),
    "kafka-python": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
}


def kcat_scram_broken() -> bool:
    """librdkafka 2.0.x (Debian's kcat 1.7.1) sends its client nonce twice in SCRAM's client-final
    message (`r=` is its nonce, then the server's whole `r=`, which already starts with it), so any
    RFC 5802 server, Kafka's included, refuses the proof; later librdkafka fixed it."""
    result = run_kcat(["-V"], timeout=10)
    found = re.search(r"librdkafka (\d+)\.(\d+)", result.stdout + result.stderr)
    return found is not None and (int(found.group(1)), int(found.group(2))) == (2, 0)


class LoginRefused(Exception):
    """The client reported a failed SASL authentication; the message is the client's own."""


class _Refusals(logging.Handler):
    """kafka-python and aiokafka report a refused login in their logs (SaslAuthenticationFailed, the
    class of Kafka's error 58) and then give up bootstrapping with a generic error."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "SaslAuthenticationFailed" in message:
            self.messages.append(message)


@contextlib.contextmanager
def refusals_logged(logger: str) -> Iterator[_Refusals]:
    handler = _Refusals()
    log = logging.getLogger(logger)
    level = log.level
    # Another test in the same worker may have quietened the client's logger (kqp demo's scenes do):
    # the refusal is a warning, so the logger must pass warnings for as long as this listens.
    if log.getEffectiveLevel() > logging.WARNING:
        log.setLevel(logging.WARNING)
    log.addHandler(handler)
    try:
        yield handler
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def sasl_settings(client: str, mechanism: str, user: str, password: str) -> dict[str, Any]:
    if client in ("confluent-kafka", "kcat"):
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism, "sasl.username": user,
                "sasl.password": password}
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


def produce(client: str, bootstrap: str, topic: str, count: int, settings: dict[str, Any],
            client_id: str = "sasl-test") -> None:
    values = [f"{client_id}-{i}".encode() for i in range(count)]
    {"confluent-kafka": _confluent, "kcat": _kcat, "aiokafka": _aiokafka, "kafka-python": _kafka_python}[client](
        bootstrap, topic, values, settings, client_id)


def _confluent(bootstrap: str, topic: str, values: list[bytes], settings: dict[str, Any], client_id: str) -> None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "message.timeout.ms": 10000, "error_cb": errors.append, **settings})
    failed: list[str] = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
    producer.flush(15)
    refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    if refused:
        raise LoginRefused(refused[0].str())
    if failed or len(producer) or errors:
        raise KafkaException(f"confluent-kafka: {failed[:3]} {errors[:3]} ({len(producer)} undelivered)")


def _kcat(bootstrap: str, topic: str, values: list[bytes], settings: dict[str, Any], client_id: str) -> None:
    options = [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]
    result = run_kcat(["-b", bootstrap, "-P", "-t", topic, "-X", f"client.id={client_id}", *options],
                      input_text="".join(v.decode() + "\n" for v in values), timeout=30)
    if "Authentication failed" in result.stderr or "SASL authentication error" in result.stderr:
        raise LoginRefused(result.stderr.strip())
    assert result.returncode == 0, f"kcat -P failed ({result.returncode}): {result.stderr[-2000:]}"


def _kafka_python(bootstrap: str, topic: str, values: list[bytes], settings: dict[str, Any], client_id: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PythonKafkaError

    with refusals_logged("kafka") as refused:
        try:
            producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5,
                                     max_block_ms=5000, **settings)
            try:
                futures = [producer.send(topic, value) for value in values]
                producer.flush(15)
                for future in futures:
                    future.get(timeout=15)
            finally:
                producer.close(timeout=5)
        except PythonKafkaError as exc:
            if refused.messages:
                raise LoginRefused(refused.messages[0]) from exc
            raise KafkaException(f"kafka-python: {exc!r}") from exc


def _aiokafka(bootstrap: str, topic: str, values: list[bytes], settings: dict[str, Any], client_id: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5,
                                    request_timeout_ms=10000, **settings)
        try:
            await asyncio.wait_for(producer.start(), 15)
            futures = [await producer.send(topic, value) for value in values]
            await asyncio.wait_for(asyncio.gather(*futures), 15)
        finally:
            await asyncio.wait_for(producer.stop(), 15)

    with refusals_logged("aiokafka") as refused:
        try:
            asyncio.run(run())
        except KafkaConnectionError as exc:
            if refused.messages:
                raise LoginRefused(refused.messages[0]) from exc
            raise
