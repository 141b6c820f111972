"""A ProxyConfig written back as plain YAML data, every default spelled out.

What for: showing the effective configuration (after defaults and CLI overrides) to an operator,
and the round-trip test that keeps the loader honest: ``parse_config(config_document(cfg)) == cfg``.
The output uses the file's own forms (``host:port`` strings, lists, ``<default>``), never Python
objects, so ``yaml.safe_dump`` can write it.
"""

from __future__ import annotations

from kqp.config.model import HostPort, ProxyConfig
from kqp.config.quota_section import quota_document


def _address(value: HostPort | None) -> str | None:
    return None if value is None else str(value)


def config_document(cfg: ProxyConfig) -> dict[str, object]:
    """The mapping that :func:`kqp.config.loader.parse_config` reads back as ``cfg``."""
    upstream: dict[str, object] = {
        "connect_timeout_ms": cfg.upstream.connect_timeout_ms,
        "metadata_refresh_ms": cfg.upstream.metadata_refresh_ms,
        "max_api_versions": dict(cfg.upstream.max_api_versions),
    }
    # An empty list would be refused on the way back in; absent means "not set yet".
    if cfg.upstream.bootstrap_servers:
        upstream["bootstrap_servers"] = [str(server) for server in cfg.upstream.bootstrap_servers]
    return {
        "listen": str(cfg.listen),
        "advertised_host": cfg.advertised_host,
        "broker_port_base": cfg.broker_port_base,
        "broker_ports": dict(cfg.broker_ports),
        "upstream": upstream,
        "max_frame_bytes": cfg.max_frame_bytes,
        "connections_max_idle_ms": cfg.connections_max_idle_ms,
        "shutdown_grace_ms": cfg.shutdown_grace_ms,
        "fetch_throttle": cfg.fetch_throttle,
        "quotas": quota_document(cfg.quotas, cfg.fleet),
        "metrics": {
            "listen": _address(cfg.metrics.listen),
            "entity_expiry_seconds": cfg.metrics.entity_expiry_seconds,
            "max_entities": cfg.metrics.max_entities,
        },
    }
