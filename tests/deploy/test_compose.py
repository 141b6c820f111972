"""docker-compose.yml validates against the Compose Specification schema and wires the stack together."""

from __future__ import annotations

import subprocess
import sys

import yaml
from deploy_files import COMPOSE, DEPLOY

from kqp.config.loader import load_config


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def check_compose_schema(path: str) -> subprocess.CompletedProcess[str]:
    # check-jsonschema ships the Compose Specification schema (vendor.compose-spec): offline.
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", path],
        capture_output=True, text=True, timeout=120, check=False,
    )


def test_compose_file_matches_the_compose_spec() -> None:
    result = check_compose_schema(str(COMPOSE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_schema_check_rejects_a_broken_file(tmp_path) -> None:
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  kqp:\n    ports: 19092\n    restart: sometimes\n")
    assert check_compose_schema(str(bad)).returncode != 0


def test_stack_has_every_service() -> None:
    services = compose()["services"]
    assert set(services) == {"kafka", "redis", "kqp", "kqp-secure", "prometheus", "grafana", "spark-job"}
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft


def test_kqp_service_wiring() -> None:
    services = compose()["services"]
    kqp = services["kqp"]
    assert kqp["build"] == {"context": "..", "dockerfile": "Dockerfile"}
    # The config directory (not the file) is mounted, so live reload follows file swaps.
    assert "./compose/kqp:/etc/kqp:ro" in kqp["volumes"]
    config = load_config(DEPLOY / "compose" / "kqp" / "kqp.yaml")
    # The admin state file lives on a named volume, writable although the container is read-only.
    assert config.admin.manage_quotas and config.admin.state_file is not None
    state_dir = config.admin.state_file.rsplit("/", 1)[0]
    assert f"kqp-state:{state_dir}" in kqp["volumes"] and "kqp-state" in compose()["volumes"]
    assert config.upstream.bootstrap_servers[0].host == "kafka"
    assert config.advertised_host == "kqp"
    published = {p.split(":")[0] for p in kqp["ports"]}
    assert config.metrics.listen is not None
    assert {str(config.listen.port), str(config.broker_port(1)), str(config.metrics.listen.port)} <= published
    # Prometheus scrapes kqp's metrics port by service name.
    prometheus = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text(encoding="utf-8"))
    targets = [t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"kqp:{config.metrics.listen.port}"]


def test_kqp_shares_its_quotas_through_the_redis_service() -> None:
    services = compose()["services"]
    assert services["redis"]["image"].startswith("redis:")
    assert "redis" in services["kqp"]["depends_on"]
    config = load_config(DEPLOY / "compose" / "kqp" / "kqp.yaml")
    assert config.fleet.scope == "cluster"
    assert config.fleet.cluster.redis_url == "redis://redis:6379/0"


def test_grafana_is_provisioned_with_the_kqp_dashboard() -> None:
    grafana = compose()["services"]["grafana"]
    assert "./grafana/kqp-dashboard.json:/var/lib/grafana/dashboards/kqp-dashboard.json:ro" in grafana["volumes"]
    provider = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "kqp.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    datasource = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


def test_spark_job_writes_through_kqp_as_a_throttled_entity() -> None:
    services = compose()["services"]
    job = services["spark-job"]
    assert job["depends_on"]["kqp"]["condition"] == "service_healthy"
    flags = dict(arg.lstrip("-").split("=", 1) for arg in job["command"])
    config = load_config(DEPLOY / "compose" / "kqp" / "kqp.yaml")
    assert flags["bootstrap"] == f"kqp:{config.listen.port}"
    quotas = {spec.client_id: values for spec, values in config.quotas.entities.items()}
    quota = quotas[flags["client-id"]]["producer_byte_rate"]
    offered = int(flags["rows-per-second"]) * int(flags["value-bytes"])
    assert offered > 2 * quota  # the job offers well above its quota, so Grafana shows throttling


def test_kqp_secure_terminates_sasl_authorizes_and_keeps_acl_changes_on_its_volume(tmp_path) -> None:
    """compose/kqp-secure: its files are where the service mounts them; with them there, the config
    loads, an example user logs in, OAUTHBEARER keys load, and the ACLs say what the README says."""
    from kqp.proxy.connection.sasl import SaslPolicy
    from kqp.proxy.runtime.jwks import _by_kid
    from kqp.quotas.acls.authorizer import Authorizer
    from kqp.quotas.acls.bindings import Operation, ResourceType

    service = compose()["services"]["kqp-secure"]
    assert service["profiles"] == ["secure"] and "./compose/kqp-secure:/etc/kqp:ro" in service["volumes"]
    folder = DEPLOY / "compose" / "kqp-secure"
    text = (folder / "kqp.yaml").read_text(encoding="utf-8")
    config_file = tmp_path / "kqp.yaml"
    config_file.write_text(text.replace("/etc/kqp/", f"{folder}/"))
    config = load_config(config_file)
    state_dir = config.authorization.state_file.rsplit("/", 1)[0]
    assert f"kqp-secure-state:{state_dir}" in service["volumes"] and "kqp-secure-state" in compose()["volumes"]
    assert config.authorization.enabled and config.sasl.oauthbearer is not None
    assert SaslPolicy.from_config(config.sasl).plain_ok("ops", "example-password")
    import json
    assert list(_by_kid(json.loads((folder / "jwks.json").read_text()))) == ["example-1"]
    acls = Authorizer(config.authorization.acls)
    assert acls.authorize("User:spark-etl", "172.18.0.5", Operation.WRITE, ResourceType.TOPIC, "spark-events")
    assert not acls.authorize("User:svc-reader", "172.18.0.5", Operation.WRITE, ResourceType.TOPIC, "spark-events")
    published = {p.split(":")[1] for p in service["ports"]}
    assert {str(config.listen.port), str(config.broker_port(1))} <= published
