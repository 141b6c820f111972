"""The immutable configuration objects the rest of kqp reads.

These are plain frozen dataclasses with no defaults of their own: every default lives in one place,
the schema tables of :mod:`kqp.config.loader`, so a value printed by ``kqp`` and a value documented
in ``deploy/kqp.example.yaml`` cannot drift apart. Mappings inside are read-only views, so a config
handed to many connections can be shared without copying.

Quota settings are :class:`kqp.quotas.model.QuotaSettings`, owned by the quotas layer; config only
builds them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kqp.config.errors import ConfigError
from kqp.quotas.acls.bindings import AclBinding
from kqp.quotas.model import QuotaSettings
from kqp.quotas.principal_mapping import PrincipalMapper

MAX_PORT = 65535

# quotas.scope: `instance` keeps Kafka's semantics (a quota per kqp instance, its workers sharing it);
# `cluster` shares each quota across every kqp instance that uses the same Redis.
QUOTA_SCOPES = ("instance", "cluster")

# The two fetch_throttle modes (README.md, "Fetch over quota"): deliver the bytes already paid for upstream, or answer
# with the broker's empty KIP-219 response.
FETCH_THROTTLE_MODES = ("deliver", "empty")

# Who authenticates clients: nobody (every user is ANONYMOUS), kqp itself, or the upstream (kqp reads
# the claimed name and adopts it once the upstream accepts it).
SASL_MODES = ("none", "terminate", "passthrough")
# What kqp speaks to an upstream (upstream.sasl) and verifies itself (terminate: OAUTHBEARER too).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
OAUTHBEARER = "OAUTHBEARER"
TERMINATED_MECHANISMS = (*SASL_MECHANISMS, OAUTHBEARER)


@dataclass(frozen=True, slots=True)
class HostPort:
    """A ``host:port`` pair; IPv6 hosts are stored bare and written in brackets."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str, *, allow_zero_port: bool = False) -> HostPort:
        """Parse ``host:port`` or ``[v6-host]:port``; raise ValueError saying what is wrong.

        Port 0 (let the OS choose) only where the caller allows it: a listener may take an
        ephemeral port, an upstream address may not.
        """
        text = text.strip()
        example = "e.g. 127.0.0.1:9092 or [::1]:9092"
        if text.startswith("["):
            host, sep, rest = text[1:].partition("]")
            if not sep or not rest.startswith(":"):
                raise ValueError(f"must be [ipv6-host]:port, {example}, got {text!r}")
            port_text = rest[1:]
        else:
            host, sep, port_text = text.rpartition(":")
            if not sep:
                raise ValueError(f"must be host:port, {example}, got {text!r}")
            if ":" in host:
                raise ValueError(f"an IPv6 host needs brackets, e.g. [::1]:9092, got {text!r}")
        if not host or any(c.isspace() for c in host):
            raise ValueError(f"host must be non-empty without spaces, got {text!r}")
        if not port_text.isascii() or not port_text.isdigit():
            raise ValueError(f"port must be a number, got {text!r}")
        port = int(port_text)
        low = 0 if allow_zero_port else 1
        if not low <= port <= MAX_PORT:
            raise ValueError(f"port must be in {low}..{MAX_PORT}, got {text!r}")
        return cls(host, port)

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Secret:
    """A value that must never be shown: logs, errors, metrics and reprs see ``***``."""

    value: str = field(repr=False)

    def reveal(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


# proxy_protocol.mode and proxy_protocol.listeners (`config/proxy_protocol_section.py`).
PROXY_PROTOCOL_MODES = ("off", "optional", "required")
PROXY_PROTOCOL_LISTENERS = ("bootstrap", "brokers")

# Kafka's ssl.client.auth values.
CLIENT_AUTH_MODES = ("required", "requested", "none")


@dataclass(frozen=True)
class TlsConfig:
    """TLS on every kqp listener (bootstrap and per-broker). Present means on."""

    cert: str
    key: str
    key_password: Secret | None
    key_password_file: str | None
    client_ca: str | None
    client_auth: str
    principal_mapping_rules: PrincipalMapper
    handshake_timeout_ms: int


@dataclass(frozen=True)
class UpstreamTlsConfig:
    """TLS from kqp to the upstream brokers. ``ca`` None trusts the system's store; ``cert`` and
    ``key`` (both or neither) are kqp's client certificate; ``server_hostname`` replaces each
    broker's host for SNI and hostname verification."""

    ca: str | None
    cert: str | None
    key: str | None
    key_password: Secret | None
    key_password_file: str | None
    server_hostname: str | None
    verify_hostname: bool


@dataclass(frozen=True)
class ProxyProtocolConfig:
    """``proxy_protocol:``: whether listeners read a load balancer's PROXY header, and from whom."""

    mode: str                                                              # off, optional, required
    trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]     # the balancers' networks
    listeners: tuple[str, ...]                                             # bootstrap, brokers
    header_timeout_ms: int

    def applies_to(self, listener: str) -> bool:
        """Whether listener `listener` (``bootstrap`` or ``broker-<id>``) reads the header."""
        if self.mode == "off":
            return False
        return ("bootstrap" if listener == "bootstrap" else "brokers") in self.listeners

    def trusts(self, ip: str) -> bool:
        """Whether a connection from `ip` (a socket's peer) may carry a header."""
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return False
        address = getattr(address, "ipv4_mapped", None) or address   # a dual-stack listener's IPv4 peer
        return any(address in network for network in self.trusted if network.version == address.version)


@dataclass(frozen=True)
class ScramCredential:
    """RFC 5802's server-side credential: what a broker stores instead of the password."""

    salt: bytes
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)


@dataclass(frozen=True)
class UserSecret:
    """What kqp verifies one user's SASL credentials against: a password (any mechanism), SCRAM
    credentials per mechanism, or both. Never shown in a repr."""

    password: str | None = field(default=None, repr=False)
    scram: Mapping[str, ScramCredential] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class OAuthBearerConfig:
    """``sasl.oauthbearer``: how kqp checks OAUTHBEARER tokens (Kafka's ``sasl.oauthbearer.*``): JWS
    signatures against the keys of a JWKS (one of ``jwks_url`` and ``jwks_file``), then ``issuer``,
    ``audience`` (any of them), ``exp`` and ``nbf`` with ``clock_skew_seconds`` of slack."""

    jwks_url: str | None
    jwks_file: str | None
    jwks_refresh_ms: int          # the URL's keys are fetched again this often (and for an unknown key id)
    jwks_timeout_ms: int
    jwks_ca: str | None           # an https URL's CA bundle (None: the system's)
    issuer: str | None
    audience: tuple[str, ...]
    clock_skew_seconds: int


@dataclass(frozen=True)
class SaslConfig:
    """Client authentication (``sasl:``). ``users`` are the file's inline ones, ``file_users`` those
    read from ``users_file`` at load; `credentials` is both together."""

    mode: str
    mechanisms: tuple[str, ...]
    users: Mapping[str, UserSecret] = field(repr=False)
    users_file: str | None
    principal_claim: str
    oauthbearer: OAuthBearerConfig | None = None
    max_reauth_ms: int | None = None   # Kafka's connections.max.reauth.ms (None: sessions do not expire)
    file_users: Mapping[str, UserSecret] = field(default_factory=dict, repr=False)

    @property
    def credentials(self) -> Mapping[str, UserSecret]:
        return {**self.file_users, **self.users}


@dataclass(frozen=True)
class UpstreamSasl:
    """kqp's own identity towards the upstream (``upstream.sasl:``)."""

    mechanism: str
    username: str
    password: str = field(repr=False)
    password_file: str | None = None   # where `password` was read from (a mounted Secret), if not inline


@dataclass(frozen=True)
class UpstreamConfig:
    """The Kafka cluster behind kqp. ``bootstrap_servers`` is empty until a file or --upstream sets it."""

    bootstrap_servers: tuple[HostPort, ...]
    connect_timeout_ms: int
    metadata_refresh_ms: int
    # api key -> highest version kqp advertises, for upstreams that advertise a version they
    # cannot serve (librdkafka's mock cluster closes the connection on the JoinGroup v6 it advertises).
    max_api_versions: Mapping[int, int] = field(default_factory=dict)
    tls: UpstreamTlsConfig | None = None
    sasl: UpstreamSasl | None = None   # None: kqp connects without SASL


@dataclass(frozen=True)
class MetricsConfig:
    """The Prometheus endpoint; ``listen`` None means no endpoint."""

    listen: HostPort | None
    entity_expiry_seconds: float
    max_entities: int
    topic_bytes: bool = False   # kqp_topic_bytes_total: every request's topics read (the report's --by topic)


@dataclass(frozen=True)
class LimitsConfig:
    """``limits:``, Kafka's connection limits (KIP-612) and a cap on pipelined requests. None: no limit."""

    max_connections: int | None                      # open client connections, this process
    max_connections_per_ip: int | None               # open client connections from one IP
    connection_creation_rate_per_ip: float | None    # new connections per second from one IP
    max_in_flight_per_connection: int | None         # requests awaiting a response before kqp stops reading


@dataclass(frozen=True)
class ClusterConfig:
    """``quotas.cluster``: where and how often a fleet of kqp instances exchanges quota usage."""

    redis_url: str | None             # redis://, rediss:// (TLS), unix://, redis[s]+sentinel://, redis[s]+cluster://
    password_env: str | None          # an environment variable holding the Redis password, if not in the URL
    sync_interval_ms: int             # each instance exchanges usage at most this often (also paces --workers)
    timeout_ms: int                   # one exchange taking longer than this counts as a failure
    expected_instances: int           # the fleet size assumed before the first exchange succeeds
    key_prefix: str                   # Redis keys start with this, so fleets can share one Redis


@dataclass(frozen=True)
class FleetConfig:
    """``quotas.scope`` and ``quotas.cluster``: whether and how quotas are shared between processes."""

    scope: str
    cluster: ClusterConfig


@dataclass(frozen=True)
class AdminConfig:
    """``admin:``: whether kqp answers Kafka's quota admin API itself, who may alter quotas, and the
    state file the changes are kept in (the config file's quotas stay the base layer under them)."""

    manage_quotas: bool
    principals: tuple[str, ...]        # Kafka's form, User:NAME
    state_file: str | None
    describe_principals: tuple[str, ...] | None = None   # None: everyone may describe


@dataclass(frozen=True)
class AuthorizationConfig:
    """``authorization:``: whether kqp authorizes requests with Kafka's ACL semantics, and the config
    file's ACLs (the base layer under the admin API's changes, kept in ``state_file``)."""

    enabled: bool | None   # None only while parsing: the loader resolves it from sasl.mode
    super_users: tuple[str, ...]
    allow_everyone_if_no_acl_found: bool
    acls: frozenset[AclBinding] = field(repr=False)
    state_file: str | None


@dataclass(frozen=True)
class ProxyConfig:
    """Everything one kqp process runs with."""

    listen: HostPort
    advertised_host: str
    broker_port_base: int
    broker_ports: Mapping[int, int]
    upstream: UpstreamConfig
    max_frame_bytes: int
    connections_max_idle_ms: int
    shutdown_grace_ms: int
    fetch_throttle: str
    quotas: QuotaSettings
    fleet: FleetConfig
    metrics: MetricsConfig
    limits: LimitsConfig
    tls: TlsConfig | None
    sasl: SaslConfig
    admin: AdminConfig
    authorization: AuthorizationConfig
    proxy_protocol: ProxyProtocolConfig
    source: str | None
    # The validated input this config was built from. CLI overrides are applied to it and parsed
    # again, so a value the file left to its default (advertised_host follows listen, the broker
    # port base follows the listen port) follows an overridden --listen too.
    document: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}), repr=False, compare=False)

    def broker_port_key(self, node_id: int) -> str:
        """The setting that gives broker ``node_id`` its port, as messages about that port name it."""
        if node_id in self.broker_ports:
            return f"broker_ports.{node_id}"
        return f"broker_port_base + {node_id}"

    def broker_port(self, node_id: int) -> int:
        """The port kqp listens on for upstream broker ``node_id``; 0 means an ephemeral port.

        A pin in ``broker_ports`` wins; otherwise ``broker_port_base + node_id``. Node ids are only
        known once the upstream's Metadata arrives, so a base that overflows for a large id is
        reported then, as a config error the operator fixes with a pin.
        """
        if node_id < 0:
            raise ValueError(f"broker node ids are non-negative, got {node_id}")
        pinned = self.broker_ports.get(node_id)
        if pinned is not None:
            return pinned
        if self.broker_port_base == 0:
            return 0
        port = self.broker_port_base + node_id
        if port > MAX_PORT:
            raise ConfigError(
                "broker_ports",
                f"broker node id {node_id}: broker_port_base {self.broker_port_base} + {node_id} "
                f"is above {MAX_PORT}; pin a port for it in broker_ports",
                self.source,
            )
        return port
