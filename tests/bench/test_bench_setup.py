"""The harness's plumbing: server processes, /proc readings, the kqp configs it writes.

The relay subprocess test runs the relay under uvloop exactly as the benchmark does (the in-process
relay tests use the default asyncio loop), against an echo server on a thread; every process it
starts it stops, and every wait is bounded.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kqp.proxy.bench import kqp_target, proc_stats
from kqp.proxy.bench.processes import Server, StartError, free_port, port_open
from kqp.proxy.bench.references import REFERENCES


@pytest.fixture
def echo_port() -> Iterator[int]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                while data := conn.recv(65536):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    listener.close()


def test_relay_process_under_uvloop_relays_and_stops(tmp_path: Path, echo_port: int) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "kqp.proxy.bench.relay", "--listen", f"127.0.0.1:{port}",
            "--upstream", f"127.0.0.1:{echo_port}"]
    server = Server("relay", argv, tmp_path / "relay.log", host="127.0.0.1", port=port,
                    ready_text="relay ready")
    with server:
        assert server.alive()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
            payload = b"kafka frame bytes" * 1000
            client.sendall(payload)  # sent at once: bytes read before upstream connects must survive
            got = b""
            while len(got) < len(payload):
                chunk = client.recv(65536)
                assert chunk, "relay closed early"
                got += chunk
        assert got == payload
        sample = proc_stats.sample(server.pid)
        assert sample is not None and sample.rss_bytes > 1_000_000 and sample.processes >= 1
    assert not server.alive()
    assert not port_open("127.0.0.1", port)


def test_server_that_exits_is_reported_with_its_output(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('boom: no config'); sys.exit(3)"]
    server = Server("broken", argv, tmp_path / "broken.log", host="127.0.0.1", port=free_port())
    with pytest.raises(StartError, match=r"exited with status 3: boom: no config"):
        server.start(timeout=10)


def test_proc_stats_sees_this_process_burn_cpu() -> None:
    import os

    before = proc_stats.sample(os.getpid())
    assert before is not None
    total = 0
    for i in range(3_000_000):  # a few tens of ms of CPU: more than one 10 ms clock tick
        total += i * i
    after = proc_stats.sample(os.getpid())
    assert after is not None and total > 0
    assert after.cpu_seconds > before.cpu_seconds
    assert after.rss_bytes > 0
    assert os.getpid() in proc_stats.descendants(os.getpid())


def test_proc_stats_resolves_less_than_a_clock_tick() -> None:
    # /proc's utime and stime count 10 ms ticks: 250 MB of consume costs kqp ~0.15 s, so a tick
    # would be 7 % of the figure. The scheduler's runtime (schedstat) counts nanoseconds, so a
    # reading is a whole number of ticks only by a one-in-ten-million chance.
    import os

    sample = proc_stats.sample(os.getpid())
    assert sample is not None and sample.cpu_seconds > 0
    ticks = sample.cpu_seconds * os.sysconf("SC_CLK_TCK")
    assert abs(ticks - round(ticks)) > 1e-9


def test_a_cpu_trace_tells_the_cpu_of_a_span_from_the_cpu_around_it() -> None:
    # What the benchmark's CPU per GB is read over: the span the clients moved data in. Here a child
    # process burns CPU for the span and then sleeps, so the span holds most of the trace's CPU. A
    # process of its own: the test's own tree may hold a Kafka node another test of the worker started.
    import subprocess
    import sys
    import time

    script = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 0.4: pass\ntime.sleep(2)\n"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        with proc_stats.CpuTrace(child.pid, interval=0.01) as trace:
            busy_from = time.monotonic()
            time.sleep(0.3)                 # inside the child's busy 0.4 s (it started a little before)
            busy_until = time.monotonic()
            time.sleep(0.4)                 # past it: the child sleeps
            idle_from = time.monotonic()
            time.sleep(0.3)
            idle_until = time.monotonic()
    finally:
        child.kill()
        child.wait()
    busy = trace.between(busy_from, busy_until)
    idle = trace.between(idle_from, idle_until)
    assert busy is not None and idle is not None
    assert busy > 0.05 and idle < busy / 2, (busy, idle)
    assert trace.between(busy_from - 10, busy_until) is None   # before the trace began: unknown, not 0


def test_cpu_per_gb_is_read_over_the_clients_windows_and_the_rest_is_set_up() -> None:
    import os

    from kqp.proxy.bench.runner import ProxyCpu, _cpu_per_gb

    trace = proc_stats.CpuTrace(os.getpid())
    trace.samples = [(10.0, 1.0), (11.0, 1.1), (13.0, 1.5), (20.0, 1.6)]   # (monotonic s, CPU s)
    whole = ProxyCpu(0.8, trace)
    two = [{"window": (11.0, 12.0), "window_bytes": 100_000_000, "bytes_moved": 150_000_000},
           {"window": (11.5, 13.0), "window_bytes": 100_000_000, "bytes_moved": 150_000_000}]
    figures = _cpu_per_gb(whole, 300_000_000, two)
    # 11.0 to 13.0: 0.4 CPU s for the 200 MB moved within the windows; the rest is set-up
    assert figures["cpu_s_per_gb"] == pytest.approx(2.0)
    assert figures["cpu_s_per_gb_whole"] == pytest.approx(0.8 / 0.3)
    assert figures["setup_cpu_s"] == pytest.approx(0.4)
    # a window at 12.0 sits between samples: interpolated, 1.1 + 0.4 / 2
    assert trace.at(12.0) == pytest.approx(1.3)
    # a client without a window, or a window outside the trace: the whole run's figure
    assert _cpu_per_gb(whole, 300_000_000, [two[0], {"bytes_moved": 1}])["cpu_s_per_gb"] == pytest.approx(0.8 / 0.3)
    late = [{"window": (19.0, 21.0), "bytes_moved": 1_000}]
    assert "setup_cpu_s" not in _cpu_per_gb(whole, 300_000_000, late)


def test_a_baseline_is_another_checkouts_kqp_run_by_its_own_interpreter(tmp_path: Path) -> None:
    from kqp.proxy.bench.references import baseline_reference

    (tmp_path / "old" / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "old" / ".venv" / "bin" / "python").touch()
    ref = baseline_reference(f"7f={tmp_path / 'old'}")
    assert ref.name == "kqp-7f" and ref.kind == "kqp" and ref.kqp_variant == "none"
    assert ref.command == (str(tmp_path / "old" / ".venv" / "bin" / "python"), "-m", "kqp.proxy.tools.cli")
    assert baseline_reference(str(tmp_path / "old")).name == "kqp-baseline"
    with pytest.raises(ValueError, match=r"no \.venv/bin/python"):
        baseline_reference(str(tmp_path / "nothing-here"))
    with pytest.raises(ValueError, match=r"\[LABEL=\]PATH"):
        baseline_reference("7f=")
    # An interpreter named directly: this one, whose kqp the probe finds able to run.
    itself = baseline_reference(f"same={sys.executable}")
    assert kqp_target.probe(list(itself.command)).available


def test_every_kqp_variant_config_is_accepted_by_kqps_own_loader() -> None:
    loader = pytest.importorskip("kqp.config.loader")
    for variant in ("none", "every-entity", "metrics-quotas", "throttle", "every-entity-pool"):
        # Through the YAML text, as the harness writes it (yaml.safe_dump refuses anything but plain types).
        text = yaml.safe_dump(kqp_target.config_for(variant, 19092, "127.0.0.1:9092", 10e6))
        config = loader.parse_config(yaml.safe_load(text), source=f"bench-{variant}")
        assert config.listen.port == 19092
        assert config.broker_port_base == 0
    quotas = loader.parse_config(kqp_target.config_for("every-entity", 19092, "127.0.0.1:9092", 10e6)).quotas
    # 3 client ids x 3 user levels + (user, <default>) x 2 + user alone x 2 + <default> client = 14
    assert len(quotas.entities) == 14
    assert all(len(limits) == len(kqp_target._quota_types()) for limits in quotas.entities.values())
    pooled = loader.parse_config(kqp_target.config_for("every-entity-pool", 19092, "127.0.0.1:9092", 10e6)).quotas
    assert pooled.entities == quotas.entities and [p.name for p in pooled.pools] == ["bench"]
    metered = loader.parse_config(kqp_target.config_for("metrics-quotas", 19092, "127.0.0.1:9092", 10e6))
    assert metered.quotas == quotas and metered.metrics.listen is not None  # every-entity, endpoint on
    throttle = loader.parse_config(kqp_target.config_for("throttle", 19092, "127.0.0.1:9092", 10e6)).quotas
    assert throttle.window_size_seconds == kqp_target.THROTTLE_WINDOW_SECONDS
    (limits,) = throttle.entities.values()
    assert limits["producer_byte_rate"] == 10e6
    for variant, quota in (("producer-rate", "producer_byte_rate"), ("request-rate", "request_rate")):
        (limits,) = loader.parse_config(kqp_target.config_for(variant, 19092, "127.0.0.1:9092", 10e6)
                                        ).quotas.entities.values()
        assert list(limits) == [quota] and limits[quota] >= 1e9   # one quota, never reached
    cluster = loader.parse_config(kqp_target.config_for("every-entity-cluster", 19092, "127.0.0.1:9092", 10e6,
                                                        redis_url="redis://127.0.0.1:6379/0"))
    assert cluster.quotas == quotas and cluster.fleet.scope == "cluster"
    assert cluster.fleet.cluster.redis_url == "redis://127.0.0.1:6379/0"
    # the classes workload's pool: adaptive, without and with the stream's class above the batch jobs'
    adaptive, ranked = (loader.parse_config(kqp_target.config_for(v, 19092, "127.0.0.1:9092", 10e6)).quotas.pools[0]
                        for v in ("adaptive-pool", "classes"))
    assert adaptive.adaptive is not None and adaptive.classes == ()
    assert [c.name for c in ranked.classes] == ["latency", "batch"] and ranked.adaptive == adaptive.adaptive


def test_the_saturated_references_are_opt_in_and_run_the_classes_workload() -> None:
    saturated = [ref for ref in REFERENCES if ref.saturated]
    assert {ref.name for ref in saturated} == {"kqp-adaptive", "kqp-classes"}
    assert all(ref.opt_in and ref.workloads == ("classes",) for ref in saturated)


def test_unknown_kqp_variant_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown kqp variant"):
        kqp_target.config_for("fast", 19092, "127.0.0.1:9092", 10e6)


def test_the_tls_references_configs_load_with_their_certificates(tmp_path: Path) -> None:
    loader = pytest.importorskip("kqp.config.loader")
    pytest.importorskip("trustme")
    from kqp.proxy.bench.references import REFERENCES, CellSettings, _kqp_tls

    settings = CellSettings(tansu_bin="tansu", workdir=tmp_path, throttle_bytes_s=10e6)
    for ref in (r for r in REFERENCES if r.tls):
        config = loader.parse_config(kqp_target.config_for("none", 19092, "127.0.0.1:9092", 10e6,
                                                           **_kqp_tls(ref, settings)))
        assert config.tls is not None and config.tls.client_auth == "required"
        assert config.tls.principal_mapping_rules.name("CN=kqp-bench,OU=x,O=y") == "kqp-bench"
        assert (config.upstream.tls is not None) == (ref.tls == "both")
