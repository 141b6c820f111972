"""The kqp Kafka sink's options, checked once on the driver.

The sink takes the options of Spark's built-in Kafka sink so a job can switch between the two by
changing only the format name: `kafka.bootstrap.servers` and every other `kafka.*` option go to the
producer with the prefix removed, and `topic` names a default topic. The built-in sink hands them to
the Java client; kqp's sink hands them to librdkafka (confluent-kafka), whose property names mostly
match. The few Java-only names a Spark job is likely to carry are refused here with the librdkafka
equivalent, on the driver, instead of failing every task on an executor with librdkafka's terser
"No such configuration property".

Everything here is plain data so it pickles to the executors and is tested without Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

KAFKA_PREFIX = "kafka."
# Options the sink reads itself; anything else outside `kafka.*` is ignored, as the built-in sink
# ignores it (Spark passes `path`, `checkpointLocation` and friends through the same map).
TOPIC_OPTION = "topic"
COMMIT_LOG_OPTION = "kqp.commitlog"

# The producer the built-in sink would build is idempotent by default since Kafka 3.0 and places
# keyed records with murmur2, as the Java client does; librdkafka's defaults differ on both.
PRODUCER_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "enable.idempotence": "true",
        # Java's default partitioner: a key lands in the same partition whichever sink wrote it.
        "partitioner": "murmur2_random",
    }
)

# Java client properties with no librdkafka property of that name: the hint says what to use.
JAVA_ONLY: Mapping[str, str] = MappingProxyType(
    {
        "key.serializer": "keys are written as bytes (string columns as UTF-8); drop the option",
        "value.serializer": "values are written as bytes (string columns as UTF-8); drop the option",
        "max.block.ms": "librdkafka does not block on metadata; drop the option",
        "buffer.memory": "use kafka.queue.buffering.max.kbytes",
        "max.request.size": "use kafka.message.max.bytes",
        "interceptor.classes": "librdkafka has no interceptors; drop the option",
        "partitioner.class": "use kafka.partitioner (murmur2_random, consistent_random, ...)",
    }
)


class SinkOptionError(ValueError):
    """An option the sink cannot accept; str() is one line naming the option."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"kqp-kafka option {option!r}: {message}")
        self.option = option


@dataclass(frozen=True)
class SinkOptions:
    """What every write task needs: the producer config and the default topic."""

    producer_config: Mapping[str, str] = field(default_factory=dict)
    topic: str | None = None
    commit_log: str | None = None

    @property
    def client_id(self) -> str | None:
        return self.producer_config.get("client.id")


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Build SinkOptions from a data source's (case-insensitive, lower-cased) option map.

    `kafka.client.id` is passed through like any other property. A job that sets none gets
    librdkafka's default (`rdkafka`), shared with every other job that set none: set it per job,
    since the client id is the quota entity kqp charges (see deploy/spark/README.md).
    """
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    producer: dict[str, str] = dict(PRODUCER_DEFAULTS)
    for key, value in lowered.items():
        if not key.startswith(KAFKA_PREFIX):
            continue
        name = key[len(KAFKA_PREFIX) :]
        if not name:
            raise SinkOptionError(key, "a kafka.* option needs a property name after the prefix")
        if name in JAVA_ONLY:
            raise SinkOptionError(key, f"not a librdkafka property: {JAVA_ONLY[name]}")
        producer[name] = value
    if not producer.get("bootstrap.servers", "").strip():
        raise SinkOptionError("kafka.bootstrap.servers", "required (point it at kqp, e.g. 127.0.0.1:19092)")
    topic = lowered.get(TOPIC_OPTION)
    if topic is not None and not topic.strip():
        raise SinkOptionError(TOPIC_OPTION, "must not be empty")
    commit_log = lowered.get(COMMIT_LOG_OPTION) or None
    # A plain dict, not a MappingProxyType: the options travel to executors by pickle.
    return SinkOptions(producer_config=producer, topic=topic, commit_log=commit_log)
