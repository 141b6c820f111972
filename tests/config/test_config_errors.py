"""Every wrong input is refused with one line naming the file, the key path and the problem.

The CLI prints str(ConfigError) and exits 2, so these tests assert on the exact printed text.
"""

import pytest

from kqp.config.errors import ConfigError
from kqp.config.loader import parse_config, read_yaml

UPSTREAM = "upstream: {bootstrap_servers: 'k:9092'}\n"


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(read_yaml(text, "kqp.yaml"), "kqp.yaml")
    line = str(info.value)
    assert "\n" not in line
    return line


CASES = [
    # --- the brief's own example
    (
        "quotas:\n  entities:\n    - user: a\n      request_rate: 1\n    - user: b\n      producer_byte_rate: fast\n",
        "quotas.entities[1].producer_byte_rate: must be a non-negative number, got 'fast'",
    ),
    # --- unknown keys, with and without a close match
    ("listn: 127.0.0.1:1\n", "listn: unknown key; did you mean 'listen'?"),
    (
        "upstream:\n  bootstrap_server: a:1\n",
        "upstream.bootstrap_server: unknown key; did you mean 'bootstrap_servers'?",
    ),
    ("metrics:\n  max_entity: 5\n", "metrics.max_entity: unknown key; did you mean 'max_entities'?"),
    ("quotas:\n  windows: 3\n", "quotas.windows: unknown key; did you mean 'window_count'?"),
    (
        "zzz: 1\n",
        "zzz: unknown key; expected one of listen, advertised_host, broker_port_base, broker_ports, upstream, "
        "max_frame_bytes, connections_max_idle_ms, shutdown_grace_ms, fetch_throttle, quotas, metrics, limits, "
        "tls, sasl, admin, authorization, proxy_protocol",
    ),
    (
        "quotas:\n  entities:\n    - client-id: x\n      request_rate: 1\n",
        "quotas.entities[0].client-id: unknown key; did you mean 'client_id'?",
    ),
    (
        "quotas:\n  entities:\n    - user: x\n      producer_rate: 1\n",
        "quotas.entities[0].producer_rate: unknown key; did you mean 'producer_byte_rate'?",
    ),
    # --- wrong types
    ("max_frame_bytes: 1.5\n", "max_frame_bytes: must be an integer >= 1, got 1.5"),
    ("max_frame_bytes: '100'\n", "max_frame_bytes: must be an integer >= 1, got '100'"),
    ("max_frame_bytes: true\n", "max_frame_bytes: must be an integer >= 1, got True"),
    ("connections_max_idle_ms: 0\n", "connections_max_idle_ms: must be an integer >= 1, got 0"),
    ("shutdown_grace_ms: -1\n", "shutdown_grace_ms: must be an integer >= 0, got -1"),
    ("upstream:\n  connect_timeout_ms: null\n", "upstream.connect_timeout_ms: must be an integer >= 1, got None"),
    ("upstream: [a:1]\n", "upstream: must be a mapping of keys, got a list"),
    ("quotas: 5\n", "quotas: must be a mapping of keys, got 5"),
    ("fetch_throttle: drop\n", "fetch_throttle: must be one of deliver, empty, got 'drop'"),
    ("fetch_throttle: [deliver]\n", "fetch_throttle: must be one of deliver, empty, got a list"),
    ("listen: 9092\n", "listen: must be a host:port string, got 9092"),
    ("metrics:\n  entity_expiry_seconds: 0\n", "metrics.entity_expiry_seconds: must be a positive number, got 0"),
    ("metrics:\n  max_entities: 0\n", "metrics.max_entities: must be an integer >= 1, got 0"),
    ("quotas:\n  window_size_seconds: 0\n", "quotas.window_size_seconds: must be a positive number, got 0"),
    ("quotas:\n  window_size_seconds: .nan\n", "quotas.window_size_seconds: must be a positive number, got nan"),
    ("quotas:\n  window_count: 1\n", "quotas.window_count: must be an integer >= 2, got 1"),
    ("quotas:\n  window_count: 11.0\n", "quotas.window_count: must be an integer >= 2, got 11.0"),
    ("quotas:\n  entities: {user: a}\n", "quotas.entities: must be a list of entity entries, got a mapping"),
    # --- ports and hosts
    ("listen: 'h:65536'\n", "listen: port must be in 0..65535, got 'h:65536'"),
    ("listen: '::1:9092'\n", "listen: an IPv6 host needs brackets, e.g. [::1]:9092, got '::1:9092'"),
    ("listen: ':9092'\n", "listen: host must be non-empty without spaces, got ':9092'"),
    ("broker_port_base: 70000\n", "broker_port_base: must be a port in 0..65535, got 70000"),
    ("broker_ports: {1: 0}\n", "broker_ports.1: must be a port in 1..65535, got 0"),
    ("broker_ports: {x: 1}\n", "broker_ports.x: must be a broker node id >= 0, got 'x'"),
    ("broker_ports: {-1: 1}\n", "broker_ports.-1: must be a broker node id >= 0, got -1"),
    ("broker_ports: [1]\n", "broker_ports: must be a mapping of broker node id to port, got a list"),
    ("broker_ports: {1: 20001, 2: 20001}\n", "broker_ports.2: port 20001 is already pinned for node 1"),
    ("listen: 'h:20001'\nbroker_ports: {7: 20001}\n", "broker_ports.7: port 20001 is also listen's port"),
    ("metrics: {listen: 'h:19092'}\n", "metrics.listen: port 19092 is also the listen port"),
    (
        "metrics: {listen: 'h:9404'}\nbroker_ports: {3: 9404}\n",
        "broker_ports.3: port 9404 is also metrics.listen's port",
    ),
    ("upstream:\n  bootstrap_servers: 'a:0'\n", "upstream.bootstrap_servers: port must be in 1..65535, got 'a:0'"),
    (
        "upstream:\n  bootstrap_servers: [a:1, b]\n",
        "upstream.bootstrap_servers[1]: must be host:port, e.g. 127.0.0.1:9092 or [::1]:9092, got 'b'",
    ),
    ("upstream:\n  bootstrap_servers: []\n", "upstream.bootstrap_servers: must name at least one broker as host:port"),
    (
        "upstream:\n  bootstrap_servers: ' , '\n",
        "upstream.bootstrap_servers: must name at least one broker as host:port",
    ),
    ("upstream:\n  bootstrap_servers: [9092]\n", "upstream.bootstrap_servers[0]: must be a host:port string, got 9092"),
    ("advertised_host: ''\n", "advertised_host: must not be empty"),
    ("advertised_host: 'h:1'\n", "advertised_host: must be a host without a port, got 'h:1'"),
    ("advertised_host: 'a b'\n", "advertised_host: must be a host name or IP address, got 'a b'"),
    ("advertised_host: 0.0.0.0\n", "advertised_host: clients cannot connect to the wildcard address '0.0.0.0'"),
    (
        "listen: 0.0.0.0:9092\n",
        "advertised_host: required when listen is a wildcard address (0.0.0.0): set the host clients "
        "connect to (or pass --advertised-host)",
    ),
    (
        "listen: '[::]:9092'\n",
        "advertised_host: required when listen is a wildcard address (::): set the host clients "
        "connect to (or pass --advertised-host)",
    ),
    ("listen: 'h:65535'\n", "broker_port_base: listen port 65535 leaves no room for listen + 1; set it"),
    # --- quota entries
    (
        "quotas:\n  entities:\n    - request_rate: 1\n",
        "quotas.entities[0]: needs a user, a client_id or both (a name or '<default>'), or a client_id_prefix",
    ),
    (
        "quotas:\n  entities:\n    - user: alice\n",
        "quotas.entities[0]: sets no quota; add one, e.g. producer_byte_rate: 1048576",
    ),
    (
        "quotas:\n  entities:\n    - {user: a, client_id: c, request_rate: 1}\n    - {user: b, request_rate: 1}\n"
        "    - {client_id: c, user: a, producer_byte_rate: 5}\n",
        "quotas.entities[2]: same entity /users/a/clients/c as quotas.entities[0]; merge the two entries",
    ),
    (
        "quotas:\n  entities:\n    - {user: '', request_rate: 1}\n",
        "quotas.entities[0].user: must not be empty",
    ),
    (
        "quotas:\n  entities:\n    - {user: null, client_id: c, request_rate: 1}\n",
        "quotas.entities[0].user: must be a string, got None",
    ),
    (
        "quotas:\n  entities:\n    - {client_id: 7, request_rate: 1}\n",
        "quotas.entities[0].client_id: must be a string (quote it: '7'), got 7",
    ),
    (
        "quotas:\n  entities:\n    - hello\n",
        "quotas.entities[0]: must be a mapping with user and/or client_id and quota values, got 'hello'",
    ),
    (
        "quotas:\n  entities:\n    - {user: a, request_rate: -1}\n",
        "quotas.entities[0].request_rate: must be a non-negative number, got -1",
    ),
    (
        "quotas:\n  entities:\n    - {user: a, consumer_byte_rate: true}\n",
        "quotas.entities[0].consumer_byte_rate: must be a non-negative number, got True",
    ),
    (
        "quotas:\n  entities:\n    - {user: a, producer_byte_rate: .inf}\n",
        "quotas.entities[0].producer_byte_rate: must be a non-negative number, got inf",
    ),
    (
        "quotas:\n  entities:\n    - {user: a, request_percentage: 0}\n",
        "quotas.entities[0].request_percentage: must be a positive number "
        "(percent of one thread; may exceed 100), got 0",
    ),
    # --- the top level
    ("- listen: a:1\n", "the top level must be a mapping of keys (listen:, upstream:, ...), got a list"),
    ("just text\n", "the top level must be a mapping of keys (listen:, upstream:, ...), got 'just text'"),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[expected.split(":")[0] for _, expected in CASES])
def test_refused_with_one_line_naming_the_key(text: str, expected: str) -> None:
    assert refusal(UPSTREAM + text if not text.startswith(("-", "just", "upstream")) else text) == (
        f"config error in kqp.yaml: {expected}"
    )


def test_long_values_are_cut_short() -> None:
    line = refusal(UPSTREAM + "fetch_throttle: " + "x" * 500 + "\n")
    assert line.endswith("got '" + "x" * 56 + "...")


def test_error_attributes() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"fetch_throttle": "drop"}, "f.yaml")
    assert (info.value.key, info.value.source) == ("fetch_throttle", "f.yaml")
    assert info.value.message == "must be one of deliver, empty, got 'drop'"


def test_without_a_source_the_line_says_so() -> None:
    assert str(ConfigError("listen", "bad")) == "config error: listen: bad"
    assert str(ConfigError("", "bad", "x.yaml")) == "config error in x.yaml: bad"


def test_messages_never_span_lines() -> None:
    assert str(ConfigError("k", "first\n  second")) == "config error: k: first second"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "listen: [\n",
            "invalid YAML at line 2, column 1: expected the node content, but found '<stream end>' "
            "(while parsing a flow node)",
        ),
        (
            "upstream:\n  bootstrap_servers: a:1\n   x: 1\n",
            "invalid YAML at line 3, column 5: mapping values are not allowed here",
        ),
        ("listen: a:1\nlisten: b:2\n", "invalid YAML at line 2, column 1: duplicate key 'listen'"),
        (
            "quotas:\n  entities:\n    - user: a\n      user: b\n",
            "invalid YAML at line 4, column 7: duplicate key 'user'",
        ),
        (
            'a: "\\q"\n',
            "invalid YAML at line 1, column 6: found unknown escape character 'q' "
            "(while scanning a double-quoted scalar)",
        ),
    ],
)
def test_invalid_yaml_gives_line_and_column(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_yaml(text, "kqp.yaml")
    assert str(info.value) == f"config error in kqp.yaml: {expected}"


def test_merge_keys_are_not_duplicates() -> None:
    data = read_yaml("base: &b {a: 1, b: 2}\nderived:\n  <<: *b\n  b: 3\n")
    assert data == {"base": {"a": 1, "b": 2}, "derived": {"a": 1, "b": 3}}
