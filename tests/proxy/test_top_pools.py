"""`kqp top`'s pool block (proxy/tools/top_pools.py): a real observer's pool series in, lines out."""

from __future__ import annotations

from prometheus_client import generate_latest

from kqp.config import quota_settings_from
from kqp.proxy.observability.metrics import PrometheusObserver
from kqp.proxy.tools.top import parse, render
from kqp.quotas.manager import QuotaManager
from kqp.quotas.model import Principal


def screen() -> list[str]:
    m = QuotaManager(quota_settings_from({"window_size_seconds": 0.2, "entities": [
        {"client_id_prefix": "job-a-", "weight": 3}],
        "pools": [{"name": "ingest", "producer_byte_rate": 300_000, "members": [{"client_id_prefix": "job-"}]}]}), 0.0)
    obs = PrometheusObserver(clock=lambda: 0.5, process_metrics=False)
    obs.bind(lambda: 0.5, m)
    m.record_produce(Principal("ANONYMOUS", "job-a-1"), 66_000, 1, 1, 0.0)
    m.record_produce(Principal("ANONYMOUS", "job-x-1"), 22_000, 1, 1, 0.0)
    scrape = parse(generate_latest(obs.registry).decode(), 1.0)
    assert set(scrape.pools) == {("ingest", "producer_byte_rate")}
    assert scrape.entities == {}   # pool series make no entity rows
    return render(scrape, "http://kqp/metrics", width=200)


def test_a_block_per_pool_and_a_line_per_member_largest_allocation_first() -> None:
    lines = screen()
    at = lines.index("POOLS")
    # 88 kB over the span's 2.2 s = 40 kB/s of 300 kB/s (13%); nobody lends yet
    assert lines[at + 1].startswith("ingest  producer_byte_rate  budget 293.0KiB/s  usage 39.1KiB/s (13%)  lent 0")
    assert lines[at + 2].split() == ["MEMBER", "USER", "USAGE", "ALLOCATION", "FAIR", "SHARE", "BORROWED", "DEMAND"]
    # job-a-: 66000 / 2.2 = 30 kB/s used over the span; demanded over the two windows it has been here,
    # 66000 / 0.4 = 165 kB/s (161.1 KiB/s); under its fair share 225k (219.7 KiB/s), which it keeps as
    # its allocation: the slack goes out by weight (3L + L = 300k) and nobody borrows
    assert lines[at + 3].split() == ["job-a-*", "-", "29.3Ki", "219.7Ki", "219.7Ki", "0", "161.1Ki"]
    assert lines[at + 4].split() == ["job-x-1", "ANONYMOUS", "9.8Ki", "73.2Ki", "73.2Ki", "0", "53.7Ki"]


def test_no_pool_no_block() -> None:
    assert "POOLS" not in render(parse("kqp_ready 1\n", 0.0), "u")


def test_a_pool_with_classes_has_a_class_column_and_a_line_per_class() -> None:
    m = QuotaManager(quota_settings_from({"window_size_seconds": 0.2, "pools": [
        {"name": "ingest", "producer_byte_rate": 400_000, "members": [{"client_id_prefix": "job-"}], "classes": [
            {"name": "latency", "members": [{"client_id_prefix": "job-stream-"}]},
            {"name": "batch", "members": [{"client_id_prefix": "job-batch-"}]}]}]}), 0.0)
    obs = PrometheusObserver(clock=lambda: 2.4, process_metrics=False)
    obs.bind(lambda: 2.4, m)
    for window in range(12):
        now = window * 0.2 + 0.01
        m.record_produce(Principal("ANONYMOUS", "job-batch-1"), 80_000, 1, 1, now)
        m.record_produce(Principal("ANONYMOUS", "job-stream-1"), 20_000, 1, 1, now)
    lines = render(parse(generate_latest(obs.registry).decode(), 1.0), "http://kqp/metrics", width=200)
    at = lines.index("POOLS")
    # a line per class, highest first: allocation, demand, what it moved, pre-emptions (the stream's
    # joining cut the batch class once); the batch job is charged its 80 kB a window here, throttled or not
    assert lines[at + 2].split() == ["class", "latency:", "allocation", "97.7KiB/s", "demand", "97.7KiB/s",
                                     "delivered", "97.7KiB/s", "pre-emptions", "0"]
    assert lines[at + 3].split() == ["class", "batch:", "allocation", "293.0KiB/s", "demand", "held", "delivered",
                                     "390.6KiB/s", "pre-emptions", "1"]
    assert lines[at + 4].split() == ["MEMBER", "USER", "CLASS", "USAGE", "ALLOCATION", "FAIR", "SHARE", "BORROWED",
                                     "DEMAND"]
    # members in class order: the stream first although its allocation is the smaller
    assert lines[at + 5].split()[:3] == ["job-stream-1", "ANONYMOUS", "latency"]
    assert lines[at + 6].split()[:3] == ["job-batch-1", "ANONYMOUS", "batch"]
