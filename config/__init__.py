"""kqp.config: the YAML file, checked into immutable objects.

The public surface is re-exported here so callers write ``from kqp.config import load_config``;
the modules behind it are split by job (schema machinery, sections, loading, dumping).
"""

from kqp.config.dump import config_document
from kqp.config.errors import ConfigError
from kqp.config.loader import load_config, parse_config, read_file, with_overrides
from kqp.config.model import ClusterConfig, FleetConfig, HostPort, MetricsConfig, ProxyConfig, UpstreamConfig
from kqp.config.quota_section import quota_settings_from

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "FleetConfig",
    "HostPort",
    "MetricsConfig",
    "ProxyConfig",
    "UpstreamConfig",
    "config_document",
    "load_config",
    "parse_config",
    "quota_settings_from",
    "read_file",
    "with_overrides",
]
