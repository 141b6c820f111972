"""The Kubernetes manifests validate against Kubernetes' schemas and agree with kqp's config.

kubernetes-validate carries the OpenAPI schemas of each Kubernetes release, so this runs offline.
The Prometheus Operator's ServiceMonitor is a custom resource those schemas do not cover: it is
checked by what makes it work (it selects an existing Service and names one of its ports).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_files import K8S, KUBERNETES_VERSION, by_kind, manifests, relative

from kqp.config.fleet_section import redis_target
from kqp.config.loader import parse_config
from kqp.config.model import HostPort, ProxyConfig

BUILTIN = [(p, d) for p, d in manifests() if not d["apiVersion"].startswith("monitoring.coreos.com/")]


def validate(doc: dict[str, Any]) -> None:
    # strict: unknown fields (a typo'd key that Kubernetes would silently drop) fail too.
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def kqp_config(variant: str) -> ProxyConfig:
    [configmap] = by_kind("ConfigMap", K8S / variant)
    return parse_config(yaml.safe_load(configmap["data"]["kqp.yaml"]), source=variant)


def sasl_config(directory: Path) -> ProxyConfig:
    """deploy/k8s/sasl's config, loaded with its Secret's files in `directory` where the pod mounts them."""
    variant = K8S / "sasl"
    [configmap], [secret], [deployment] = (by_kind(kind, variant) for kind in ("ConfigMap", "Secret", "Deployment"))
    [mount] = [m for m in kqp_container(deployment["spec"]["template"]["spec"])["volumeMounts"]
               if m["name"] == "secrets"]
    for name, content in secret["stringData"].items():
        (directory / name).write_text(content)
    text = configmap["data"]["kqp.yaml"].replace(mount["mountPath"], str(directory))
    return parse_config(yaml.safe_load(text), source="sasl")


def kqp_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    [container] = [c for c in pod_spec.get("initContainers", []) + pod_spec["containers"] if c["name"] == "kqp"]
    return container


@pytest.mark.parametrize(("path", "doc"), BUILTIN, ids=[f"{relative(p)}:{d['kind']}" for p, d in BUILTIN])
def test_manifest_validates_strictly(path: Path, doc: dict[str, Any]) -> None:
    validate(doc)


def test_a_broken_manifest_is_caught() -> None:
    # The validator is really consulted: a Service port that is a string fails.
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"ports": [{"port": "not-a-port"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


@pytest.mark.parametrize("variant", ["sidecar", "shared"])
def test_service_monitor_selects_a_service_port(variant: str) -> None:
    [monitor] = by_kind("ServiceMonitor", K8S / variant)
    services = by_kind("Service", K8S / variant)
    wanted = monitor["spec"]["selector"]["matchLabels"]
    matching = [s for s in services if wanted.items() <= s["metadata"]["labels"].items()]
    assert matching, f"{variant}: the ServiceMonitor selects no Service"
    port_names = {p["name"] for s in matching for p in s["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"


@pytest.mark.parametrize("role", ["driver", "executor"])
def test_pod_template_runs_kqp_as_a_native_sidecar(role: str) -> None:
    [pod] = [d for p, d in manifests(K8S / "sidecar") if p.name == f"{role}-pod-template.yaml"]
    spec = pod["spec"]
    kqp = kqp_container(spec)
    # An init container with restartPolicy Always: up before Spark, stopped after it.
    assert kqp in spec["initContainers"] and kqp["restartPolicy"] == "Always"
    assert kqp["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert kqp["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert kqp["securityContext"]["runAsNonRoot"] is True
    [spark] = spec["containers"]
    assert spark["name"] == f"spark-kubernetes-{role}"
    config = kqp_config("sidecar")
    # Spark talks to kqp over the pod's loopback, at the address kqp listens on.
    assert {e["name"]: e["value"] for e in spark["env"]}["KAFKA_BOOTSTRAP_SERVERS"] == str(config.listen)
    assert config.listen.host == "127.0.0.1" and config.advertised_host == "127.0.0.1"
    # The metrics port: container port, annotations and the ConfigMap agree.
    assert config.metrics.listen is not None
    metrics_port = config.metrics.listen.port
    assert [p["containerPort"] for p in kqp["ports"]] == [metrics_port]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(metrics_port)
    # The config comes from the ConfigMap, mounted as a directory (no subPath: it must update live).
    [configmap] = by_kind("ConfigMap", K8S / "sidecar")
    [volume] = [v for v in spec["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    [mount] = kqp["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["mountPath"] == "/etc/kqp" and "subPath" not in mount
    # The headless metrics Service selects these pods.
    [service] = by_kind("Service", K8S / "sidecar")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_shared_service_exposes_every_port_kqp_advertises() -> None:
    config = kqp_config("shared")
    [deployment] = by_kind("Deployment", K8S / "shared")
    [service] = by_kind("Service", K8S / "shared")
    pod = deployment["spec"]["template"]
    kqp = kqp_container(pod["spec"])
    container_ports = {p["name"]: p["containerPort"] for p in kqp["ports"]}
    service_ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert config.metrics.listen is not None
    expected = {"bootstrap": config.listen.port, "metrics": config.metrics.listen.port}
    # Brokers 1..3 on broker_port_base + node id, under the Service's name.
    expected |= {f"broker-{n}": config.broker_port(n) for n in (1, 2, 3)}
    assert container_ports == expected
    assert service_ports == {name: (port, name) for name, port in expected.items()}
    meta = service["metadata"]
    assert config.advertised_host == f"{meta['name']}.{meta['namespace']}.svc.cluster.local"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # SIGTERM drain fits inside Kubernetes' grace period.
    assert pod["spec"]["terminationGracePeriodSeconds"] * 1000 > config.shutdown_grace_ms
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == by_kind("ConfigMap", K8S / "shared")[0]["metadata"]["name"]


def test_shared_network_policy_admits_only_prometheus_to_metrics_and_anyone_to_kafka_ports() -> None:
    config = kqp_config("shared")
    [policy] = by_kind("NetworkPolicy", K8S / "shared")
    [deployment] = by_kind("Deployment", K8S / "shared")
    pod = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    served = {p["containerPort"] for p in kqp_container(pod["spec"])["ports"]}
    assert config.metrics.listen is not None and config.metrics.listen.port in served
    rules = policy["spec"]["ingress"]
    open_ports = {p["port"] for rule in rules if "from" not in rule for p in rule["ports"]}
    assert open_ports == served - {config.metrics.listen.port}   # every Kafka port, never metrics
    [metrics_rule] = [rule for rule in rules if "from" in rule]
    assert [p["port"] for p in metrics_rule["ports"]] == [config.metrics.listen.port]
    [peer] = metrics_rule["from"]   # one peer with both selectors: Prometheus pods in that namespace only
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    assert "kubernetes.io/metadata.name" in peer["namespaceSelector"]["matchLabels"]


@pytest.mark.parametrize("variant", ["sidecar", "shared"])
def test_variants_that_authenticate_nobody_answer_no_admin_api_and_claim_no_volume(variant: str) -> None:
    # Every client is User:ANONYMOUS here, so no principal could ever alter; and a claim (ReadWriteMany
    # for several replicas) would keep the pods Pending where no storage class provides it.
    config = kqp_config(variant)
    assert config.sasl.mode != "terminate" and config.tls is None
    assert not config.admin.manage_quotas
    assert not by_kind("PersistentVolumeClaim", K8S / variant)


def test_sasl_service_keeps_the_admin_state_file_on_its_claim_and_its_admins_can_log_in(tmp_path: Path) -> None:
    from kqp.proxy.connection.sasl import SaslPolicy

    config = sasl_config(tmp_path)
    [deployment] = by_kind("Deployment", K8S / "sasl")
    [claim] = by_kind("PersistentVolumeClaim", K8S / "sasl")
    pod = deployment["spec"]["template"]
    assert config.admin.manage_quotas and config.admin.state_file is not None
    mounts = {m["mountPath"]: m for m in kqp_container(pod["spec"])["volumeMounts"]}
    mount = mounts[str(Path(config.admin.state_file).parent)]
    assert not mount.get("readOnly", False)
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    # Several replicas share the file: the claim must be mountable by all of them. One replica on a
    # ReadWriteOnce claim: the old pod must let go of it before the new one starts.
    assert deployment["spec"]["replicas"] == 1 or claim["spec"]["accessModes"] == ["ReadWriteMany"]
    if claim["spec"]["accessModes"] == ["ReadWriteOnce"]:
        assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert pod["spec"]["securityContext"]["fsGroup"] == pod["spec"]["securityContext"]["runAsUser"]
    # Whoever may alter is a user of the Secret's users file (the documented example password).
    policy = SaslPolicy.from_config(config.sasl)
    assert config.admin.principals
    for principal in config.admin.principals:
        kind, _, name = principal.partition(":")
        assert kind == "User" and policy.plain_ok(name, "example-password"), principal


def test_sasl_service_authorizes_with_acls_and_tokens_and_keeps_acl_changes_on_its_claim(tmp_path: Path) -> None:
    from kqp.quotas.acls.authorizer import Authorizer
    from kqp.quotas.acls.bindings import Operation, ResourceType

    config = sasl_config(tmp_path)
    auth, oauth = config.authorization, config.sasl.oauthbearer
    assert auth.enabled and auth.state_file is not None and config.admin.state_file is not None
    assert Path(auth.state_file).parent == Path(config.admin.state_file).parent   # the same claim
    assert oauth is not None and oauth.jwks_url and oauth.issuer and oauth.audience
    assert "OAUTHBEARER" in config.sasl.mechanisms and config.sasl.max_reauth_ms
    acls = Authorizer(auth.acls, auth.super_users, auth.allow_everyone_if_no_acl_found)
    assert acls.authorize("User:spark-orders-etl", "10.0.0.1", Operation.WRITE, ResourceType.TOPIC, "orders-eu")
    assert not acls.authorize("User:spark-orders-etl", "10.0.0.1", Operation.READ, ResourceType.TOPIC, "orders-eu")
    assert not acls.authorize("User:svc-billing", "10.0.0.1", Operation.WRITE, ResourceType.TOPIC, "orders-eu")


def test_tls_variant_mounts_every_file_its_config_names(tmp_path: Path) -> None:
    """deploy/k8s/tls: every certificate path in the config is a key of the mounted Secret, and the
    config loads once those files exist (here: placeholders in a temporary directory)."""
    [configmap] = by_kind("ConfigMap", K8S / "tls")
    [secret] = by_kind("Secret", K8S / "tls")
    [deployment] = by_kind("Deployment", K8S / "tls")
    pod = deployment["spec"]["template"]["spec"]
    kqp = kqp_container(pod)
    [volume] = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    [mount] = [m for m in kqp["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount, "a subPath mount never sees a rotated Secret"
    text = configmap["data"]["kqp.yaml"]
    named = sorted(set(re.findall(r"/etc/\S+", text)) - {"/etc/kqp/kqp.yaml"})
    assert named and all(path.startswith(mount["mountPath"] + "/") for path in named)
    assert {path.rsplit("/", 1)[1] for path in named} <= set(secret["stringData"])
    for path in named:
        (tmp_path / path.rsplit("/", 1)[1]).write_text("placeholder")
    config = parse_config(yaml.safe_load(text.replace(mount["mountPath"], str(tmp_path))), source="tls ConfigMap")
    assert config.tls is not None and config.tls.client_auth == "required"
    assert config.upstream.tls is not None and config.upstream.tls.verify_hostname
    assert config.tls.principal_mapping_rules.name("CN=Orders-ETL,OU=spark,O=Acme") == "orders-etl"
    # The pod's group reads the key; nobody else does.
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    assert volume["secret"]["defaultMode"] == 0o440


def test_sasl_service_reads_its_secrets_from_the_mounted_secret(tmp_path: Path) -> None:
    # The ConfigMap names files the Secret provides at the path the Deployment mounts it on: with the
    # Secret's files put there, the config loads, and the documented example user logs in.
    from kqp.proxy.connection.sasl import SaslPolicy

    variant = K8S / "sasl"
    [configmap], [secret], [deployment] = (by_kind(kind, variant) for kind in ("ConfigMap", "Secret", "Deployment"))
    pod = deployment["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    [mount] = [m for m in kqp_container(pod)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True and pod["securityContext"]["fsGroup"] == 10001
    text = configmap["data"]["kqp.yaml"]
    assert mount["mountPath"] in text and "password:" not in text, "secrets belong in the Secret"
    config = sasl_config(tmp_path)
    assert config.sasl.mode == "terminate" and config.upstream.sasl is not None
    assert config.upstream.sasl.password == secret["stringData"]["upstream-password"]
    assert SaslPolicy.from_config(config.sasl).plain_ok("spark-orders-etl", "example-password")
    [service] = by_kind("Service", variant)
    meta = service["metadata"]
    assert config.advertised_host == f"{meta['name']}.{meta['namespace']}.svc.cluster.local"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("variant", ["sidecar", "shared"])
def test_fleet_quotas_reach_the_fleet_redis(variant: str) -> None:
    """Both variants share quotas through deploy/k8s/fleet's Redis: its Service's address, its Secret."""
    [redis] = by_kind("Deployment", K8S / "fleet")
    [service] = by_kind("Service", K8S / "fleet")
    assert service["spec"]["selector"].items() <= redis["spec"]["template"]["metadata"]["labels"].items()
    [redis_container] = redis["spec"]["template"]["spec"]["containers"]
    [secret_env] = [e for e in redis_container["env"] if e["name"] == "REDIS_PASSWORD"]
    secret = secret_env["valueFrom"]["secretKeyRef"]
    assert "$(REDIS_PASSWORD)" in redis_container["args"]
    config = kqp_config(variant)
    assert config.fleet.scope == "cluster"
    meta = service["metadata"]
    [port] = service["spec"]["ports"]
    assert config.fleet.cluster.redis_url == f"redis://{meta['name']}.{meta['namespace']}.svc.cluster.local:" \
                                             f"{port['port']}/0"
    pods = ([d["spec"] for p, d in manifests(K8S / "sidecar") if p.name.endswith("-pod-template.yaml")]
            if variant == "sidecar" else [by_kind("Deployment", K8S / "shared")[0]["spec"]["template"]["spec"]])
    assert pods
    for pod in pods:
        env = {e["name"]: e for e in kqp_container(pod).get("env", [])}
        assert config.fleet.cluster.password_env in env, "kqp reads the Redis password from this variable"
        assert env[config.fleet.cluster.password_env]["valueFrom"]["secretKeyRef"] == secret


def test_the_redis_cluster_values_and_the_kqp_config_that_points_at_them() -> None:
    """deploy/k8s/fleet/redis-cluster: the chart's values make three masters with a replica each,
    keep nothing but nodes.conf, take the fleet's Secret; kqp's section reaches the chart's Service
    and reads the password as every kqp pod does."""
    folder = K8S / "fleet" / "redis-cluster"
    values = yaml.safe_load((folder / "values.yaml").read_text())
    assert (values["cluster"]["nodes"], values["cluster"]["replicas"]) == (6, 1)
    [fleet_secret] = {e["valueFrom"]["secretKeyRef"]["name"] for e in
                      by_kind("Deployment", K8S / "fleet")[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (values["usePassword"], values["existingSecret"], values["existingSecretPasswordKey"]) == \
        (True, fleet_secret, "password")
    settings = dict(line.split(" ", 1) for line in values["redis"]["configmap"].splitlines())
    assert settings["save"] == '""' and values["redis"]["useAOFPersistence"] == "no"
    assert settings["maxmemory-policy"] == "volatile-ttl"   # only keys with a TTL may go: never an epoch
    config = parse_config(yaml.safe_load((folder / "kqp-fleet.yaml").read_text()), source="redis-cluster")
    target = redis_target(config.fleet.cluster.redis_url or "")
    assert config.fleet.scope == "cluster"
    assert target.cluster_nodes == ((f"{values['fullnameOverride']}.kqp.svc.cluster.local", 6379),)
    assert config.fleet.cluster.password_env == kqp_config("shared").fleet.cluster.password_env


def kqp_pods() -> list[tuple[str, dict[str, Any]]]:
    """(variant, pod template) of every manifest that runs kqp: Deployments' templates and the sidecars' pods."""
    out = []
    for path, doc in manifests():
        pod = doc["spec"]["template"] if doc.get("kind") == "Deployment" else doc if doc.get("kind") == "Pod" else None
        if pod is not None and any(c["name"] == "kqp" for c in pod["spec"].get("initContainers", [])
                                   + pod["spec"]["containers"]):
            out.append((path.parent.name, pod))
    return out


def test_every_kqp_is_scraped_at_its_metrics_port_so_a_rollout_can_read_its_history() -> None:
    """kqp keeps no usage history: `kqp recommend` and `kqp report` read it from Prometheus, which must
    scrape every kqp pod, replicas and sidecars alike. Each pod's annotations name the container port
    its config's metrics endpoint listens on, bound beyond loopback so that Prometheus reaches it."""
    pods = kqp_pods()
    assert {variant for variant, _ in pods} == {"sidecar", "shared", "tls", "sasl"}
    for variant, pod in pods:
        annotations = pod["metadata"]["annotations"]
        [configmap] = by_kind("ConfigMap", K8S / variant)   # its metrics section (the TLS and SASL files aside)
        listen = HostPort.parse(yaml.safe_load(configmap["data"]["kqp.yaml"])["metrics"]["listen"])
        assert listen.host == "0.0.0.0", f"{variant}: Prometheus cannot reach {listen}"
        ports = [p["containerPort"] for p in kqp_container(pod["spec"])["ports"] if "metrics" in p["name"]]
        assert ports == [listen.port] == [int(annotations["prometheus.io/port"])], variant
        assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"


def test_the_monthly_report_runs_kqp_report_as_the_cli_reads_it() -> None:
    from kqp.proxy.tools.cli import build_parser
    from kqp.proxy.tools.prometheus_api import parse_duration

    [cronjob] = by_kind("CronJob", K8S / "rollout")
    [container] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["kqp"]
    args = build_parser().parse_args(container["args"])
    assert (args.command, args.format) == ("report", "csv")
    assert parse_duration(args.since) >= 31 * 86400 - 1, "a month, whole"
    # The Prometheus the NetworkPolicy admits to kqp's metrics lives in `monitoring`.
    assert ".monitoring.svc" in args.prometheus
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
