"""`quotas.scope` and `quotas.cluster`: defaults, checked Redis addresses, one-line errors, round trips."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kqp.config import ConfigError, config_document, load_config, parse_config
from kqp.config.fleet_section import CLUSTER_FIELDS, FLEET_FIELDS, RedisTarget, redis_target
from kqp.config.loader import METRICS_FIELDS, TOP_FIELDS, UPSTREAM_FIELDS
from kqp.config.quota_section import QUOTA_FIELDS

EXAMPLE_FILE = Path(__file__).resolve().parents[2] / "deploy" / "kqp.example.yaml"


def cluster(**keys: Any) -> dict[str, Any]:
    return {"quotas": {"scope": "cluster", "cluster": {"redis_url": "redis://r:6379/0", **keys}}}


def error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return str(info.value)


def test_instance_scope_is_the_default() -> None:
    fleet = parse_config({}).fleet
    assert fleet.scope == "instance"
    c = fleet.cluster
    assert (c.redis_url, c.password_env, c.sync_interval_ms, c.timeout_ms, c.expected_instances, c.key_prefix) == \
        (None, None, 100, 250, 1, "kqp")


def test_cluster_scope_with_every_key() -> None:
    fleet = parse_config(cluster(sync_interval_ms=50, timeout_ms=80, expected_instances=3, key_prefix="team-a",
                                 password_env="REDIS_PW")).fleet
    assert fleet.scope == "cluster"
    assert (fleet.cluster.redis_url, fleet.cluster.sync_interval_ms, fleet.cluster.expected_instances) == \
        ("redis://r:6379/0", 50, 3)
    assert (fleet.cluster.key_prefix, fleet.cluster.password_env, fleet.cluster.timeout_ms) == \
        ("team-a", "REDIS_PW", 80)


def test_cluster_scope_needs_a_redis() -> None:
    assert error({"quotas": {"scope": "cluster"}}) == (
        "config error: quotas.cluster.redis_url: required when quotas.scope is cluster (e.g. redis://redis:6379/0)")


@pytest.mark.parametrize(("data", "message"), [
    ({"quotas": {"scope": "fleet"}}, "quotas.scope: must be one of instance, cluster, got 'fleet'"),
    (cluster(redis_url="http://r:1"), "quotas.cluster.redis_url: must start with redis://, rediss://, unix://, "
                                      "redis+sentinel://, rediss+sentinel://, redis+cluster:// or "
                                      "rediss+cluster://, got 'http://r:1'"),
    (cluster(redis_url="redis://r:port"), "quotas.cluster.redis_url: not a Redis URL"),
    (cluster(redis_url="redis+sentinel://s1:26379"), "quotas.cluster.redis_url: needs the Sentinel service name"),
    (cluster(redis_url="redis+cluster://r0:6379,r1:x/"), "quotas.cluster.redis_url: cluster nodes must be "
                                                        "host:port[,host:port...], got 'redis+cluster://r0:6379,r1:x/'"),
    (cluster(redis_url="redis+cluster://r0:6379/1"), "quotas.cluster.redis_url: a Redis Cluster has only db 0"),
    (cluster(redis_url="redis+cluster://r0,,r1/"), "quotas.cluster.redis_url: cluster nodes must be host:port"),
    (cluster(sync_interval_ms=5), "quotas.cluster.sync_interval_ms: must be an integer in 10..60000, got 5"),
    (cluster(expected_instances=0), "quotas.cluster.expected_instances: must be an integer >= 1, got 0"),
    (cluster(key_prefix="a b"), "quotas.cluster.key_prefix: must be letters, digits and _.:- only, got 'a b'"),
    (cluster(password_env="1X"), "quotas.cluster.password_env: must be an environment variable name, got '1X'"),
    (cluster(redis="r"), "quotas.cluster.redis: unknown key; did you mean 'redis_url'?"),
])
def test_one_line_errors(data: dict[str, Any], message: str) -> None:
    assert message in error(data)


def test_plain_urls() -> None:
    assert redis_target("redis://:pw@r:6380/2") == RedisTarget("redis://:pw@r:6380/2")
    assert redis_target("rediss://r").ssl
    assert redis_target("unix:///run/redis.sock").sentinels == ()


def test_sentinel_urls() -> None:
    target = redis_target("redis+sentinel://u:p%40ss@s1:26380,s2,[::1]:26381/my%20master/3")
    assert target.sentinels == (("s1", 26380), ("s2", 26379), ("::1", 26381))
    assert (target.service, target.db, target.username, target.password, target.ssl) == \
        ("my master", 3, "u", "p@ss", False)
    assert redis_target("rediss+sentinel://s1/m").ssl
    # Several sentinels with a port each, as the README shows (urlsplit alone cannot read the ports).
    assert redis_target("redis+sentinel://sentinel-0:26379,sentinel-1:26379,sentinel-2:26379/kqp-fleet/0").sentinels \
        == (("sentinel-0", 26379), ("sentinel-1", 26379), ("sentinel-2", 26379))


def test_cluster_urls() -> None:
    target = redis_target("redis+cluster://u:p%40ss@r0:7000,r1,[::1]:7001/")
    assert target.cluster_nodes == (("r0", 7000), ("r1", 6379), ("::1", 7001))
    assert (target.username, target.password, target.ssl, target.sentinels, target.query) == \
        ("u", "p@ss", False, (), "")
    assert redis_target("redis+cluster://r0:7000").cluster_nodes == (("r0", 7000),)
    assert redis_target("redis+cluster://r0:7000/0").cluster_nodes == (("r0", 7000),)
    tls = redis_target("rediss+cluster://r0:7000/?ssl_ca_certs=/etc/ca.pem")
    assert tls.ssl and tls.query == "ssl_ca_certs=/etc/ca.pem"
    assert redis_target("redis+cluster://:secret@r0,r1/").shown == "redis+cluster://:***@r0,r1/"


def test_passwords_are_not_shown() -> None:
    assert redis_target("redis://user:secret@r:6379/0").shown == "redis://user:***@r:6379/0"
    assert redis_target("redis+sentinel://:secret@s1,s2/m").shown == "redis+sentinel://:***@s1,s2/m"


def test_fleet_round_trips_and_reload_reads_it() -> None:
    cfg = parse_config(cluster(expected_instances=4))
    again = parse_config(yaml.safe_load(yaml.safe_dump(config_document(cfg))))
    assert again.fleet == cfg.fleet


def _keys(fields: dict[str, Any], prefix: str = "") -> set[str]:
    nested = {"upstream": UPSTREAM_FIELDS, "metrics": METRICS_FIELDS, "quotas": QUOTA_FIELDS,
              "cluster": CLUSTER_FIELDS}
    out: set[str] = set()
    for key in fields:
        path = f"{prefix}.{key}" if prefix else key
        out.add(path)
        if key in nested:
            out |= _keys(nested[key], path)
    return out


def _document_keys(data: Any, prefix: str = "") -> set[str]:
    if not isinstance(data, dict):
        return set()
    out: set[str] = set()
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        out.add(path)
        if key not in ("broker_ports", "max_api_versions"):   # their keys are data, not schema
            out |= _document_keys(value, path)
    return out


def test_the_example_file_documents_every_key() -> None:
    text = EXAMPLE_FILE.read_text()
    documented = _document_keys(yaml.safe_load(text))
    # Sections the example keeps commented out (the file runs as is), each checked key by key by its
    # own test (test_config_tls, test_config_sasl, test_config_authorization); here: present, as commented blocks.
    commented = {"tls", "sasl", "authorization", "upstream.tls", "upstream.sasl", "upstream.max_api_versions"}
    for key in commented:
        assert f"# {key.rsplit('.', 1)[-1]}:" in text, f"deploy/kqp.example.yaml lost its commented {key}"
    missing = {k for k in _keys(TOP_FIELDS) - documented if not any(k == c or k.startswith(c + ".") for c in commented)}
    assert not missing, f"deploy/kqp.example.yaml does not document: {sorted(missing)}"
    assert set(FLEET_FIELDS) <= set(QUOTA_FIELDS)
    assert load_config(EXAMPLE_FILE).fleet.cluster.redis_url == "redis://redis:6379/0"
