"""The load-balancer examples agree with kqp's config: HAProxy beside the compose stack, an AWS NLB on Kubernetes.

A balancer that writes the PROXY header must front every port kqp advertises (a broker address
naming kqp directly would go round it), kqp must advertise the balancer's name, and trust a header
from the balancer's address and nowhere else.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deploy_files import DEPLOY, K8S, by_kind

from kqp.config.loader import load_config, parse_config

HAPROXY_DIR = DEPLOY / "compose" / "haproxy"
OVERRIDE = HAPROXY_DIR / "docker-compose.haproxy.yml"


def haproxy_backends() -> dict[int, tuple[str, int, str]]:
    """frontend port -> (server host, server port, its options), from compose/haproxy/haproxy.cfg."""
    text = (HAPROXY_DIR / "haproxy.cfg").read_text()
    binds = re.findall(r"frontend (\S+)\n  bind :(\d+)\n  default_backend (\S+)", text)
    servers = dict(re.findall(r"backend (\S+)\n  server \S+ ([^\n]+)", text))
    out = {}
    for _, port, backend in binds:
        address, *options = servers[backend].split()
        host, server_port = address.rsplit(":", 1)
        out[int(port)] = (host, int(server_port), " ".join(options))
    return out


def test_haproxy_fronts_every_kqp_port_with_the_v2_header() -> None:
    config = load_config(HAPROXY_DIR / "kqp" / "kqp.yaml")
    backends = haproxy_backends()
    # The compose stack's one broker (node id 1) and the bootstrap, each on the port kqp listens on.
    assert set(backends) == {config.listen.port, config.broker_port(1)}
    for port, (host, server_port, options) in backends.items():
        assert (host, server_port, options) == ("kqp", port, "send-proxy-v2")
    assert config.advertised_host == "haproxy"


def test_haproxy_config_is_valid(tmp_path: Path) -> None:
    haproxy = subprocess.run(["which", "haproxy"], capture_output=True, text=True).stdout.strip()
    if not haproxy:
        pytest.skip("haproxy is not installed")
    # The compose names do not resolve here: point them at loopback, nothing else changes.
    text = (HAPROXY_DIR / "haproxy.cfg").read_text().replace("kqp:", "127.0.0.1:").replace("127.0.0.11", "127.0.0.1")
    path = tmp_path / "haproxy.cfg"
    path.write_text(text)
    check = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_compose_override_wires_haproxy_in() -> None:
    override = yaml.safe_load(OVERRIDE.read_text())
    services = override["services"]
    base = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    assert set(services) - set(base) == {"haproxy"}
    assert "./compose/haproxy/kqp:/etc/kqp:ro" in services["kqp"]["volumes"]
    assert "--bootstrap=haproxy:19092" in services["spark-job"]["command"]
    # Only HAProxy's fixed address is trusted, and it is inside the network's subnet.
    config = load_config(HAPROXY_DIR / "kqp" / "kqp.yaml")
    address = services["haproxy"]["networks"]["default"]["ipv4_address"]
    subnet = ipaddress.ip_network(override["networks"]["default"]["ipam"]["config"][0]["subnet"])
    assert config.proxy_protocol.trusted == (ipaddress.ip_network(f"{address}/32"),)
    assert ipaddress.ip_address(address) in subnet
    assert config.proxy_protocol.mode == "optional"
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
                             str(OVERRIDE)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_nlb_service_sends_the_header_to_every_port_kqp_advertises() -> None:
    [service] = by_kind("Service", K8S / "nlb")
    [configmap] = by_kind("ConfigMap", K8S / "nlb")
    [shared_configmap] = by_kind("ConfigMap", K8S / "shared")
    [deployment] = by_kind("Deployment", K8S / "shared")
    config = parse_config(yaml.safe_load(configmap["data"]["kqp.yaml"]), source="nlb")
    annotations = service["metadata"]["annotations"]
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-proxy-protocol"] == "*"
    assert service["spec"]["type"] == "LoadBalancer"
    assert annotations["external-dns.alpha.kubernetes.io/hostname"] == config.advertised_host
    assert config.proxy_protocol.mode == "required" and config.proxy_protocol.trusted
    # It replaces the shared variant's ConfigMap, which the shared Deployment mounts.
    assert configmap["metadata"]["name"] == shared_configmap["metadata"]["name"]
    container_ports = {p["name"]: p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]
                       ["ports"]}
    expected = {"bootstrap": config.listen.port} | {f"broker-{n}": config.broker_port(n) for n in (1, 2, 3)}
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        name: (port, name) for name, port in expected.items()}
    assert all(container_ports[name] == port for name, port in expected.items())
    # Health checks on the metrics endpoint, which reads no header.
    assert config.metrics.listen is not None
    assert annotations["service.beta.kubernetes.io/aws-load-balancer-healthcheck-port"] == str(
        config.metrics.listen.port)
