"""``quotas.scope`` and ``quotas.cluster``: whether quotas are shared between kqp processes, and how.

Kept apart from the quota values (quota_section.py) because it says where usage is exchanged, not
what an entity may use, and it cannot change on a live reload (a change is logged as needing a
restart). The Redis address is checked here, once, into a :class:`RedisTarget`, so a typo stops
kqp at start with one line instead of failing every sync.

Three kinds of address, one URL form: one server (`redis://`, `rediss://`, `unix://`, as redis-py
reads them), a Sentinel group (`redis+sentinel://` the sentinels `/` the master group's name), and
a Redis Cluster (`redis+cluster://` some of its nodes `/`, which kqp asks for the rest). The `+`
schemes name several hosts, comma-separated, as redis-py's own URLs cannot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from kqp.config.errors import ConfigError, shown
from kqp.config.model import QUOTA_SCOPES, ClusterConfig, FleetConfig
from kqp.config.schema import Field, choice, integer, name, optional, read_section

DEFAULT_SENTINEL_PORT = 26379
_PLAIN_SCHEMES = ("redis", "rediss", "unix")
_SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
_CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
DEFAULT_REDIS_PORT = 6379
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PREFIX = re.compile(r"[A-Za-z0-9_.:-]+")


@dataclass(frozen=True)
class RedisTarget:
    """A checked Redis address: one server (``url``, as redis-py reads it), a Sentinel group or a
    Redis Cluster."""

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()   # a Sentinel group's sentinels
    service: str | None = None                    # the Sentinel master group name
    db: int = 0
    username: str | None = None
    password: str | None = None
    ssl: bool = False
    cluster_nodes: tuple[tuple[str, int], ...] = ()   # a Redis Cluster's nodes to start from
    query: str = ""                               # a cluster URL's options (?ssl_ca_certs=...), as redis-py reads them

    @property
    def shown(self) -> str:
        """The address without its password, for logs, metrics and /readyz."""
        return re.sub(r"//([^@/]*):[^@/]*@", r"//\1:***@", self.url)


def redis_target(url: str, path: str = "quotas.cluster.redis_url") -> RedisTarget:
    """Check a Redis URL; raise ConfigError naming `path` when redis-py could not use it."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in _PLAIN_SCHEMES:
            _ = parts.port   # a port that is not a number raises here (several hosts are split below)
    except ValueError as exc:
        raise ConfigError(path, f"not a Redis URL ({exc}), got {shown(url)}") from None
    if scheme in _PLAIN_SCHEMES:
        if scheme != "unix" and not parts.hostname:
            raise ConfigError(path, f"needs a host, e.g. redis://redis:6379/0, got {shown(url)}")
        if scheme == "unix" and not parts.path:
            raise ConfigError(path, f"needs a socket path, e.g. unix:///run/redis.sock, got {shown(url)}")
        return RedisTarget(url, ssl=scheme == "rediss")
    if scheme not in _SENTINEL_SCHEMES + _CLUSTER_SCHEMES:
        raise ConfigError(path, "must start with redis://, rediss://, unix://, redis+sentinel://, "
                                f"rediss+sentinel://, redis+cluster:// or rediss+cluster://, got {shown(url)}")
    # urlsplit reads one host; these URLs name several: split the netloc by hand.
    auth, _, hosts = parts.netloc.rpartition("@")
    username, _, password = auth.partition(":") if auth else ("", "", "")
    user = unquote(username) or None, unquote(password) or None
    segments = [s for s in parts.path.split("/") if s]
    if scheme in _CLUSTER_SCHEMES:
        nodes = _hosts(hosts, DEFAULT_REDIS_PORT, "cluster nodes", path, url)
        if segments not in ([], ["0"]):
            raise ConfigError(path, f"a Redis Cluster has only db 0: name its nodes and nothing after them, e.g. "
                                    f"redis+cluster://redis-0:6379,redis-1:6379/, got {shown(url)}")
        return RedisTarget(url, cluster_nodes=nodes, query=parts.query, username=user[0], password=user[1],
                           ssl=scheme.startswith("rediss"))
    sentinels = _hosts(hosts, DEFAULT_SENTINEL_PORT, "sentinels", path, url)
    if not segments or len(segments) > 2 or (len(segments) == 2 and not segments[1].isdigit()):
        raise ConfigError(path, f"needs the Sentinel service name and an optional db, e.g. "
                                f"redis+sentinel://s1:26379,s2:26379/mymaster/0, got {shown(url)}")
    return RedisTarget(url, sentinels, unquote(segments[0]), int(segments[1]) if len(segments) == 2 else 0,
                       user[0], user[1], scheme.startswith("rediss"))


def _hosts(hosts: str, default_port: int, what: str, path: str, url: str) -> tuple[tuple[str, int], ...]:
    """``host[:port][,host[:port]...]`` (an IPv6 host in brackets) as (host, port) pairs."""
    found: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, _, port_text = item.strip().rpartition(":") if ":" in item else (item.strip(), "", "")
        if not host or (port_text and not port_text.isdigit()):
            raise ConfigError(path, f"{what} must be host:port[,host:port...], got {shown(url)}")
        found.append((host.strip("[]"), int(port_text) if port_text else default_port))
    return tuple(found)


def _url(value: object, path: str) -> str:
    text = name(value, path)
    redis_target(text, path)
    return text


def _env_name(value: object, path: str) -> str:
    text = name(value, path)
    if not _ENV_NAME.fullmatch(text):
        raise ConfigError(path, f"must be an environment variable name, got {shown(value)}")
    return text


def _prefix(value: object, path: str) -> str:
    text = name(value, path)
    if not _PREFIX.fullmatch(text):
        raise ConfigError(path, f"must be letters, digits and _.:- only, got {shown(value)}")
    return text


CLUSTER_FIELDS = {
    "redis_url": Field(optional(_url), None),
    "password_env": Field(optional(_env_name), None),
    "sync_interval_ms": Field(integer(10, 60000), 100),
    "timeout_ms": Field(integer(1, 60000), 250),
    "expected_instances": Field(integer(minimum=1), 1),
    "key_prefix": Field(_prefix, "kqp"),
}
FLEET_FIELDS = {
    "scope": Field(choice(*QUOTA_SCOPES), "instance"),
    "cluster": Field(lambda value, path: ClusterConfig(**read_section(value, path, CLUSTER_FIELDS)), {}),
}


def fleet_config(scope: str, cluster: ClusterConfig, path: str = "quotas") -> FleetConfig:
    """The two keys together, with the rule that ties them: cluster scope needs a Redis."""
    if scope == "cluster" and cluster.redis_url is None:
        raise ConfigError(f"{path}.cluster.redis_url", "required when quotas.scope is cluster "
                                                       "(e.g. redis://redis:6379/0)")
    return FleetConfig(scope, cluster)


def fleet_document(fleet: FleetConfig) -> dict[str, object]:
    """``scope`` and ``cluster`` as the file writes them (what :data:`FLEET_FIELDS` reads back)."""
    c = fleet.cluster
    return {"scope": fleet.scope, "cluster": {
        "redis_url": c.redis_url, "password_env": c.password_env, "sync_interval_ms": c.sync_interval_ms,
        "timeout_ms": c.timeout_ms, "expected_instances": c.expected_instances, "key_prefix": c.key_prefix,
    }}
