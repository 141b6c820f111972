"""`kqp top`'s pure parts: exposition text in, ordered rows and screen lines out."""

from __future__ import annotations

import math

from prometheus_client import generate_latest

from kqp.proxy.observability.metrics import PrometheusObserver
from kqp.proxy.tools.top import Scrape, human, ordered, parse, render, run_top, with_throttle_rates
from kqp.quotas.model import Principal

TEXT = """\
# TYPE kqp_quota_limit gauge
kqp_quota_limit{quota="producer_byte_rate",user="ANONYMOUS",client_id="slow"} 1000
kqp_quota_usage{quota="producer_byte_rate",user="ANONYMOUS",client_id="slow"} 900
kqp_quota_limit{quota="producer_byte_rate",user="ANONYMOUS",client_id="hog"} 1000
kqp_quota_usage{quota="producer_byte_rate",user="ANONYMOUS",client_id="hog"} 2500
kqp_quota_limit{quota="request_rate",user="ANONYMOUS",client_id="hog"} 100
kqp_quota_usage{quota="request_rate",user="ANONYMOUS",client_id="hog"} 50
# TYPE kqp_throttle_seconds counter
kqp_throttle_seconds_total{quota="producer_byte_rate",user="ANONYMOUS",client_id="hog"} 12
kqp_throttle_seconds_total{quota="request_rate",user="ANONYMOUS",client_id="hog"} 3
# TYPE kqp_requests counter
kqp_requests_total{api="Fetch",user="ANONYMOUS",client_id="idle"} 4
kqp_entity_muted_connections{user="ANONYMOUS",client_id="hog"} 2
kqp_muted_connections 2
kqp_connections{listener="bootstrap"} 1
kqp_connections{listener="broker-1"} 3
kqp_delay_queue_size{quota="producer_byte_rate"} 2
kqp_ready 1
"""


def test_parse_reduces_the_exposition_to_rows() -> None:
    s = parse(TEXT, 100.0)
    hog = s.entities[("ANONYMOUS", "hog", False)]
    assert hog.quotas == {"producer_byte_rate": (2500, 1000), "request_rate": (50, 100)}
    assert hog.throttle_seconds == 15
    assert hog.muted == 2
    assert hog.worst == 2.5
    assert ("ANONYMOUS", "idle", False) in s.entities           # traffic without a quota still gets a row
    assert (s.connections, s.muted, s.delay_queue, s.ready) == (4, 2, 2, 1)


def test_a_prefix_group_gets_a_row_of_its_own() -> None:
    s = parse('kqp_quota_group_limit{quota="producer_byte_rate",user="",client_id_prefix="spark-job-42-"} 100\n'
              'kqp_quota_group_usage{quota="producer_byte_rate",user="",client_id_prefix="spark-job-42-"} 150\n',
              0.0)
    group = s.entities[("", "spark-job-42-", True)]
    assert (group.quotas, group.worst) == ({"producer_byte_rate": (150, 100)}, 1.5)


def test_a_client_id_spelled_like_a_group_keeps_its_own_row() -> None:
    s = parse('kqp_quota_group_usage{quota="producer_byte_rate",user="",client_id_prefix="x"} 150\n'
              'kqp_quota_usage{quota="producer_byte_rate",user="",client_id="x*"} 7\n', 0.0)
    rows = {(e.name, e.group): e.quotas["producer_byte_rate"][0] for e in s.entities.values()}
    assert rows == {("x*", True): 150, ("x*", False): 7}


def test_throttle_rate_is_the_counter_change_per_second() -> None:
    before = parse(TEXT, 100.0)
    after = parse(TEXT.replace("} 12\n", "} 13.5\n"), 102.0)
    with_throttle_rates(after, before)
    # (13.5 + 3) - (12 + 3) = 1.5 s of throttle over 2 s.
    assert after.entities[("ANONYMOUS", "hog", False)].throttle_rate == 0.75
    assert after.entities[("ANONYMOUS", "slow", False)].throttle_rate == 0.0
    reset = with_throttle_rates(parse(TEXT.replace("} 12\n", "} 1\n"), 104.0), after)
    assert reset.entities[("ANONYMOUS", "hog", False)].throttle_rate == 2.0   # counter reset: (1 + 3) / 2 s


def test_furthest_over_quota_first() -> None:
    rows = ordered(parse(TEXT, 0.0))
    assert [e.client_id for e in rows] == ["hog", "slow", "idle"]


def test_zero_quota_in_use_is_infinitely_over() -> None:
    s = parse('kqp_quota_limit{quota="request_rate",user="u",client_id="z"} 0\n'
              'kqp_quota_usage{quota="request_rate",user="u",client_id="z"} 1\n', 0.0)
    assert math.isinf(s.entities[("u", "z", False)].worst)


def test_render_shows_rate_against_limit_in_the_first_row() -> None:
    lines = render(with_throttle_rates(parse(TEXT, 2.0), parse(TEXT, 1.0)), "http://x/metrics", width=200)
    table = lines[lines.index("") + 1:]
    assert table[0].split()[:3] == ["USER", "CLIENT_ID", "OVER"]
    first = table[1].split()
    assert first[:3] == ["ANONYMOUS", "hog", "250%"]
    assert "2.4Ki/1000" in first and "50/100" in first and first[-2:] == ["0.00s/s", "2"]
    assert "connections 4  muted 2  delay queue 2" in lines[1]


def test_render_fits_the_terminal() -> None:
    text = "".join(f'kqp_requests_total{{api="Produce",user="u",client_id="c{i}"}} 1\n' for i in range(100))
    lines = render(parse(text, 0.0), "http://x", width=30, height=12)
    assert len(lines) == 12 and all(len(line) <= 30 for line in lines)
    assert lines[-1].startswith("... ")


def test_human_numbers() -> None:
    assert human(1536, "B/s") == "1.5Ki"
    assert human(1000, "/s") == "1.0k"
    assert human(12, "%") == "12"
    assert human(3 * 1024**3, "B/s") == "3.0Gi"


def test_parses_what_the_observer_exports() -> None:
    obs = PrometheusObserver(process_metrics=False, clock=lambda: 0.0)
    obs.request(Principal("ANONYMOUS", "c"), 0, 10)
    obs.throttled(Principal("ANONYMOUS", "c"), "producer_byte_rate", 0.5)
    s = parse(generate_latest(obs.registry).decode(), 0.0)
    assert s.entities[("ANONYMOUS", "c", False)].throttle_seconds == 0.5


def test_once_against_nothing_says_so_and_fails(capsys) -> None:
    assert run_top("http://127.0.0.1:9/metrics", once=True) == 1
    assert "cannot read http://127.0.0.1:9/metrics" in capsys.readouterr().out


def test_empty_scrape_renders() -> None:
    assert render(Scrape(0.0), "u")[0].startswith("kqp top  u")
