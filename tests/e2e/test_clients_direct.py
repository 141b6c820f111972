"""Two clients that cannot talk to an upstream directly, and do through kqp (issue 2).

These prove kqp's ApiVersions normalisation matters, rather than assuming it: kafka-python 3
cannot decode the librdkafka mock's ApiVersions v4 answer, and Debian's kcat (librdkafka 2.0.2)
fails ApiVersions against Tansu. Each test first shows the direct failure, for the documented
reason, then the same client doing a full keyed round trip through kqp. Against a real cluster
(KQP_TEST_BOOTSTRAP) there is no direct failure to show, so the tests skip.
"""

from __future__ import annotations

import logging

import pytest
from helpers.clients import DRIVERS, kafka_python_brokers
from helpers.kcat import run_kcat
from helpers.scenarios import keyed_round_trip, metadata_shows_only_kqp
from kafka.errors import KafkaError

pytestmark = pytest.mark.e2e


def test_kafka_python_fails_directly_against_mock_but_works_through_kqp(
        mock_cluster: str, kqp, caplog: pytest.LogCaptureFixture) -> None:
    if mock_cluster.kind != "mock":
        pytest.skip("the direct failure is specific to librdkafka's mock cluster")
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaError):
        kafka_python_brokers(mock_cluster, timeout_ms=3000)
    assert any("ApiVersionsResponse" in r.getMessage() and "Unable to decode" in r.getMessage()
               for r in caplog.records), "kafka-python failed directly, but not at ApiVersions"

    proxy = kqp(mock_cluster)
    driver = DRIVERS["kafka-python"]
    metadata_shows_only_kqp(driver, proxy.bootstrap, mock_cluster, mock_cluster.kind)
    keyed_round_trip(driver, proxy.bootstrap, mock_cluster.kind, count=40)


def test_kcat_fails_directly_against_tansu_but_works_through_kqp(tansu: str, kqp) -> None:
    if tansu.kind != "tansu":
        pytest.skip("the direct failure is specific to Tansu")
    direct = run_kcat(["-b", tansu, "-L", "-m", "3"], timeout=30)
    assert direct.returncode != 0, f"kcat -L unexpectedly worked directly against Tansu:\n{direct.stdout}"
    assert "ApiVersion" in direct.stderr, f"kcat failed directly, but not at ApiVersions:\n{direct.stderr}"

    proxy = kqp(tansu)
    driver = DRIVERS["kcat"]
    metadata_shows_only_kqp(driver, proxy.bootstrap, tansu, tansu.kind)
    keyed_round_trip(driver, proxy.bootstrap, tansu.kind, count=40)
