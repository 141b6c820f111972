"""The kqp command line as an operator meets it: config errors, check-config, SIGTERM, wrong flags.

A wrong config must stop kqp before it listens anywhere, with exit code 2 and exactly one line on
stderr that names the offending key (or file), for `kqp run` and `kqp check-config` alike: that
line is all a container log or a CI job shows; `check-config` refuses with the very line `run`
would, and warns of legal values that may surprise (a quota of 0) with exit code 0. A port another
process holds is said with the key that set it. A running kqp must exit 0 on SIGTERM even with a
client connected, within its shutdown grace time. A flag a subcommand does not know gets that
subcommand's usage and the flag meant; `kqp top` and `kqp explain` find kqp through its config file.
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient
from helpers.kqp_process import run_kqp_cli
from helpers.net import LOOPBACK, free_port, read_until_eof, split_host_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "deploy" / "kqp.example.yaml"
CONFIG_ERROR = 2


def good_config() -> dict:
    return {
        "listen": f"127.0.0.1:{free_port()}",
        "broker_port_base": 0,
        "upstream": {"bootstrap_servers": ["127.0.0.1:9092"]},
        "quotas": {"entities": [{"client_id": "spark-writer", "producer_byte_rate": 1048576},
                                {"user": "<default>", "request_rate": 500}]},
    }


def with_change(change: dict) -> str:
    data = good_config()
    data.update(change)
    return yaml.safe_dump(data, sort_keys=False)


DUPLICATE_ENTITY = {"quotas": {"entities": [{"client_id": "a", "producer_byte_rate": 10},
                                            {"client_id": "b", "request_rate": 5},
                                            {"client_id": "a", "consumer_byte_rate": 20}]}}

# name -> (file text, or None for "no such file"; a regex-free fragment the one line must contain)
BAD_CONFIGS: dict[str, tuple[str | None, str]] = {
    "unknown-key": (with_change({"listne": "127.0.0.1:1"}), "listne"),
    "unknown-nested-key": (with_change({"upstream": {"bootstrap_servers": ["127.0.0.1:9092"],
                                                     "conect_timeout_ms": 5}}), "upstream.conect_timeout_ms"),
    "wrong-type": (with_change({"max_frame_bytes": "big"}), "max_frame_bytes"),
    "wrong-quota-type": (with_change({"quotas": {"entities": [{"client_id": "a",
                                                                "producer_byte_rate": "fast"}]}}),
                         "quotas.entities[0].producer_byte_rate"),
    "port-out-of-range": (with_change({"listen": "127.0.0.1:70000"}), "listen"),
    "invalid-yaml": ("listen: 127.0.0.1:1\nupstream: [unclosed\n", "line"),
    "duplicate-quota-entity": (with_change(DUPLICATE_ENTITY), "quotas.entities"),
    "unreadable-file": (None, "does-not-exist.yaml"),
}


def write_case(tmp_path: Path, case: str) -> Path:
    text, _ = BAD_CONFIGS[case]
    path = tmp_path / ("does-not-exist.yaml" if text is None else f"{case}.yaml")
    if text is not None:
        path.write_text(text)
    return path


def assert_one_line_error(result, fragment: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == CONFIG_ERROR, \
        f"exit {result.returncode}, wanted {CONFIG_ERROR}; stderr:\n{result.stderr}"
    assert len(lines) == 1, f"wanted exactly one stderr line, got {len(lines)}:\n{result.stderr}"
    assert fragment in lines[0], f"the error line does not name {fragment!r}: {lines[0]}"


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
@pytest.mark.parametrize("command", ["run", "check-config"])
def test_bad_config_exits_2_with_one_line(command: str, case: str, tmp_path: Path) -> None:
    path = write_case(tmp_path, case)
    args = ["run", "--config", str(path)] if command == "run" else ["check-config", str(path)]
    result = run_kqp_cli(*args, timeout=30)
    assert_one_line_error(result, BAD_CONFIGS[case][1])
    if case == "duplicate-quota-entity":
        # Both entries are named, so the operator can find the pair.
        assert "[0]" in result.stderr and "[2]" in result.stderr, result.stderr


def test_run_without_upstream_is_a_config_error(tmp_path: Path) -> None:
    result = run_kqp_cli("run", "--listen", f"127.0.0.1:{free_port()}", timeout=30)
    assert_one_line_error(result, "upstream.bootstrap_servers")


def test_bad_flag_value_names_the_flag(tmp_path: Path) -> None:
    result = run_kqp_cli("run", "--upstream", "127.0.0.1:9092", "--listen", "127.0.0.1:99999", timeout=30)
    assert_one_line_error(result, "--listen")


# name -> (changes to a good file, or the key to remove; flags given to both commands; the one line's fragment)
REFUSED_BY_RUN: dict[str, tuple[dict | str, tuple[str, ...], str]] = {
    "no-upstream": ("upstream", (), "upstream.bootstrap_servers"),
    "workers-on-an-ephemeral-port": ({"listen": "127.0.0.1:0"}, ("--workers", "2"), "--workers"),
    "password-variable-not-set": ({"quotas": {"scope": "cluster", "cluster": {
        "redis_url": "redis://127.0.0.1:9/0", "password_env": "KQP_TEST_UNSET_PASSWORD"}}}, (),
        "quotas.cluster.password_env"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_BY_RUN))
def test_check_config_refuses_what_run_refuses_in_the_same_line(case: str, tmp_path: Path) -> None:
    change, flags, fragment = REFUSED_BY_RUN[case]
    data = good_config()
    if isinstance(change, str):
        del data[change]
    else:
        data.update(change)
    path = tmp_path / "kqp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    checked = run_kqp_cli("check-config", str(path), *flags)
    assert_one_line_error(checked, fragment)
    ran = run_kqp_cli("run", "--config", str(path), *flags)
    assert_one_line_error(ran, fragment)
    assert ran.stderr == checked.stderr


def test_check_config_takes_run_s_flags(tmp_path: Path) -> None:
    data = good_config()
    del data["upstream"]
    path = tmp_path / "kqp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_kqp_cli("check-config", str(path), "--upstream", "127.0.0.1:9092")
    assert result.returncode == 0, result.stderr


def test_check_config_accepts_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(yaml.safe_dump(good_config(), sort_keys=False))
    result = run_kqp_cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", f"warnings for a plain file: {result.stderr}"


def test_check_config_warns_of_a_zero_quota_and_still_exits_0(tmp_path: Path) -> None:
    data = good_config()
    data["quotas"]["entities"].append({"client_id": "paused-job", "producer_byte_rate": 0})
    path = tmp_path / "kqp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_kqp_cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"config warning in {path}: quotas.entities[2].producer_byte_rate: 0 blocks /clients/paused-job: any use "
        "throttles it for the whole span (11 s); Kafka refuses 0"]
    assert result.stdout.startswith(f"{path}: ok"), result.stdout


# the subcommand's words, what follows them, what it leaves unrecognized (None: argparse refuses something
# else first), the flag meant
WRONG_FLAGS: dict[str, tuple[tuple[str, ...], tuple[str, ...], str | None, str]] = {
    "run": (("run",), ("--upstrem", "127.0.0.1:9092"), "--upstrem 127.0.0.1:9092", "--upstream"),
    "check-config": (("check-config",), ("kqp.yaml", "--advertised-hots", "kqp.internal"),
                     "--advertised-hots kqp.internal", "--advertised-host"),
    "top": (("top",), ("--confg", "kqp.yaml"), "--confg kqp.yaml", "--config"),
    "explain": (("explain",), ("--clientid", "etl"), "--clientid etl", "--client-id"),
    # --bootstrap or --config is required: argparse says so before it looks at what is left over
    "quotas describe": (("quotas", "describe"), ("--bootstrp", "127.0.0.1:9092"), None, "--bootstrap"),
}


@pytest.mark.parametrize("case", sorted(WRONG_FLAGS))
def test_a_wrong_flag_gets_the_subcommands_usage_and_the_flag_meant(case: str) -> None:
    words, given, unrecognized, meant = WRONG_FLAGS[case]
    result = run_kqp_cli(*words, *given)
    lines = result.stderr.strip().splitlines()
    command = " ".join(("kqp", *words))
    assert result.returncode == CONFIG_ERROR, result.stderr
    assert lines[0].startswith(f"usage: {command} "), f"not {command}'s usage:\n{result.stderr}"
    assert lines[-1].startswith(f"{command}: error: "), result.stderr
    assert lines[-1].endswith(f"; did you mean {meant}?"), result.stderr
    if unrecognized is not None:
        assert f"unrecognized arguments: {unrecognized};" in lines[-1], result.stderr


def test_top_and_explain_find_kqp_through_its_config_file(mock_cluster: str, kqp: Any) -> None:
    port = free_port()
    proxy = kqp(mock_cluster, metrics={"listen": f"{LOOPBACK}:{port}"})
    top = run_kqp_cli("top", "--config", str(proxy.config_path), "--once", "--interval", "0.2")
    assert top.returncode == 0, top.stdout + top.stderr
    first = top.stdout.splitlines()[0]
    assert first.startswith(f"kqp top  http://{LOOPBACK}:{port}/metrics ") and first.endswith(" ready"), first
    explained = run_kqp_cli("explain", "-c", str(proxy.config_path), "--client-id", "nobody-yet", "--json")
    assert explained.returncode == 0, explained.stderr
    assert json.loads(explained.stdout)["client_id"] == "nobody-yet"


def test_top_without_an_endpoint_in_the_config_file_says_so(tmp_path: Path) -> None:
    path = tmp_path / "kqp.yaml"
    path.write_text(yaml.safe_dump(good_config(), sort_keys=False))
    for command in (("top", "--once"), ("explain", "--client-id", "etl")):
        result = run_kqp_cli(*command, "--config", str(path))
        assert_one_line_error(result, "metrics.listen: not set")


def test_check_config_accepts_the_shipped_example() -> None:
    if not EXAMPLE_CONFIG.exists():
        pytest.fail(f"{EXAMPLE_CONFIG} is missing: the deploy folder must ship a commented example")
    result = run_kqp_cli("check-config", str(EXAMPLE_CONFIG))
    assert result.returncode == 0, result.stderr


def test_sigterm_with_open_client_connection_exits_0(tansu: str, kqp) -> None:
    grace_ms = 3000
    proxy = kqp(tansu, shutdown_grace_ms=grace_ms)
    api_versions_v0 = struct.pack(">ihhih", 13, 18, 0, 5, 3) + b"raw"
    with socket.create_connection(split_host_port(proxy.bootstrap), timeout=5) as sock:
        sock.sendall(api_versions_v0)
        size, correlation_id = struct.unpack(">ii", sock.recv(8, socket.MSG_WAITALL))
        assert correlation_id == 5
        sock.recv(size - 4, socket.MSG_WAITALL)
        # The connection is open and idle; now stop kqp under it.
        started = time.monotonic()
        code = proxy.stop(signal.SIGTERM, timeout=grace_ms / 1000 + 5)
        elapsed = time.monotonic() - started
        assert code == 0, f"exit {code} after SIGTERM; output:\n{proxy.logs()}"
        assert elapsed < grace_ms / 1000 + 2, f"took {elapsed:.1f}s to exit, grace is {grace_ms} ms"
        _, closed = read_until_eof(sock, 2)
        assert closed, "the client connection survived kqp's exit"


# -- ports another process holds -------------------------------------------------------------------

@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port another process (this test) listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("key", ["listen", "metrics.listen"])
def test_a_port_in_use_stops_kqp_naming_the_key_and_the_port(key: str, held_port: int, mock_cluster: str,
                                                              kqp: Any) -> None:
    setting = {"listen": f"{LOOPBACK}:{held_port}"} if key == "listen" else \
        {"metrics": {"listen": f"{LOOPBACK}:{held_port}"}}
    proxy = kqp(mock_cluster, wait="none", **setting)
    assert proxy.proc.wait(timeout=30) == CONFIG_ERROR, proxy.logs()
    line = proxy.wait_for_log("cannot start:")
    assert f"cannot start: {key}: cannot listen on {LOOPBACK}:{held_port}: Address already in use" in line, line


@pytest.mark.parametrize("setting", ["broker_ports", "broker_port_base"])
def test_a_broker_port_in_use_is_said_with_its_key(setting: str, held_port: int, mock_cluster: str,
                                                   kqp: Any) -> None:
    # kqp still serves (the other brokers' listeners, and this one's once the port is free); the
    # warning says which setting gave the port.
    node = min(AdminClient({"bootstrap.servers": str(mock_cluster)}).list_topics(timeout=10).brokers)
    config = {"broker_ports": {node: held_port}} if setting == "broker_ports" else \
        {"broker_port_base": held_port - node}
    proxy = kqp(mock_cluster, **config)
    key = f"broker_ports.{node}" if setting == "broker_ports" else f"broker_port_base + {node}"
    line = proxy.wait_for_log("no listener for")
    assert f"broker {node}: {key}: cannot listen on {LOOPBACK}:{held_port}: Address already in use" in line, line
