"""The kqp-kafka sink's options: the built-in sink's names, librdkafka underneath, one-line errors."""

from __future__ import annotations

import pickle

import pytest

from kqp.spark.options import PRODUCER_DEFAULTS, SinkOptionError, parse_sink_options


def test_kafka_options_lose_their_prefix_and_keep_the_defaults() -> None:
    opts = parse_sink_options({
        "kafka.bootstrap.servers": "127.0.0.1:19092",
        "kafka.client.id": "spark-etl",
        "kafka.linger.ms": "20",
        "topic": "events",
        "checkpointlocation": "/tmp/ck",  # Spark's own options share the map; ignored
    })
    assert opts.producer_config == {
        **PRODUCER_DEFAULTS,
        "bootstrap.servers": "127.0.0.1:19092",
        "client.id": "spark-etl",
        "linger.ms": "20",
    }
    assert opts.topic == "events"
    assert opts.client_id == "spark-etl"
    assert opts.commit_log is None


def test_idempotence_and_java_partitioning_are_defaults_a_job_can_override() -> None:
    opts = parse_sink_options({"kafka.bootstrap.servers": "b:1", "kafka.enable.idempotence": "false",
                               "kafka.partitioner": "consistent_random"})
    assert opts.producer_config["enable.idempotence"] == "false"
    assert opts.producer_config["partitioner"] == "consistent_random"
    assert parse_sink_options({"kafka.bootstrap.servers": "b:1"}).producer_config["partitioner"] == "murmur2_random"


def test_option_names_are_case_insensitive_like_spark_options() -> None:
    opts = parse_sink_options({"Kafka.Bootstrap.Servers": "b:1", "TOPIC": "t", "kqp.commitLog": "/x"})
    assert opts.producer_config["bootstrap.servers"] == "b:1"
    assert opts.topic == "t"
    assert opts.commit_log == "/x"


def test_no_client_id_means_librdkafkas_default() -> None:
    assert parse_sink_options({"kafka.bootstrap.servers": "b:1"}).client_id is None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, "kqp-kafka option 'kafka.bootstrap.servers': required"),
        ({"kafka.bootstrap.servers": "  "}, "kqp-kafka option 'kafka.bootstrap.servers': required"),
        ({"kafka.bootstrap.servers": "b:1", "topic": ""}, "kqp-kafka option 'topic': must not be empty"),
        ({"kafka.bootstrap.servers": "b:1", "kafka.": "x"}, "kqp-kafka option 'kafka.': a kafka.* option"),
        ({"kafka.bootstrap.servers": "b:1", "kafka.key.serializer": "x"},
         "kqp-kafka option 'kafka.key.serializer': not a librdkafka property: keys are written as bytes"),
        ({"kafka.bootstrap.servers": "b:1", "kafka.max.request.size": "9"},
         "kqp-kafka option 'kafka.max.request.size': not a librdkafka property: use kafka.message.max.bytes"),
    ],
)
def test_refused_options_name_the_option_in_one_line(options: dict[str, str], expected: str) -> None:
    with pytest.raises(SinkOptionError) as info:
        parse_sink_options(options)
    assert str(info.value).startswith(expected)
    assert "\n" not in str(info.value)


def test_options_pickle_to_executors() -> None:
    opts = parse_sink_options({"kafka.bootstrap.servers": "b:1", "topic": "t"})
    assert pickle.loads(pickle.dumps(opts)) == opts
