"""`kqp top`'s pure parts: exposition text in, ordered rows and screen lines out."""

from __future__ import annotations

import math
from collections import deque

from prometheus_client import generate_latest

from kqp.proxy.observability.metrics import PrometheusObserver
from kqp.proxy.tools.top import LEGEND, Scrape, baseline, human, ordered, parse, render, run_top, with_rates
from kqp.quotas.model import Principal

TEXT = """\
# TYPE kqp_quota_limit gauge
kqp_quota_limit{quota="producer_byte_rate",user="ANONYMOUS",client_id="slow"} 1000
kqp_quota_usage{quota="producer_byte_rate",user="ANONYMOUS",client_id="slow"} 900
kqp_quota_limit{quota="producer_byte_rate",user="ANONYMOUS",client_id="hog"} 1000
kqp_quota_usage{quota="producer_byte_rate",user="ANONYMOUS",client_id="hog"} 2500
kqp_quota_limit{quota="request_rate",user="ANONYMOUS",client_id="hog"} 100
kqp_quota_usage{quota="request_rate",user="ANONYMOUS",client_id="hog"} 50
# TYPE kqp_muted_seconds counter
kqp_muted_seconds_total{quota="producer_byte_rate",user="ANONYMOUS",client_id="hog"} 12
kqp_muted_seconds_total{quota="request_rate",user="ANONYMOUS",client_id="hog"} 3
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
    assert hog.muted_seconds == {"producer_byte_rate": 12, "request_rate": 3}
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


def test_throttled_is_the_muted_seconds_counter_per_second() -> None:
    before = parse(TEXT, 100.0)
    after = with_rates(parse(TEXT.replace("} 12\n", "} 13.5\n"), 102.0), before)
    # (13.5 + 3) - (12 + 3) = 1.5 s muted over 2 s: one connection muted 75% of the time.
    assert after.entities[("ANONYMOUS", "hog", False)].throttled_rate() == 0.75
    assert after.entities[("ANONYMOUS", "slow", False)].throttled_rate() == 0.0
    reset = with_rates(parse(TEXT.replace("} 12\n", "} 1\n"), 104.0), after)
    # The producer_byte_rate counter went back (a reset: 1 s since), request_rate's did not move: 1 / 2 s.
    assert reset.entities[("ANONYMOUS", "hog", False)].throttled_rate() == 0.5


def test_rates_start_from_the_read_about_ten_seconds_back() -> None:
    history = deque(parse(TEXT, t) for t in (0.0, 4.0, 8.0, 12.0, 16.0))
    # At 19 s the latest read at least 10 s old is the one at 8 s; older ones are dropped.
    first = baseline(history, 19.0)
    assert first is not None and first.taken_at == 8.0 and len(history) == 3
    assert baseline(deque(), 0.0) is None


def test_furthest_over_quota_first() -> None:
    rows = ordered(parse(TEXT, 0.0))
    assert [(e.client_id, group) for e, group in rows] == [("hog", None), ("slow", None), ("idle", None)]


def test_zero_quota_in_use_is_infinitely_over() -> None:
    s = parse('kqp_quota_limit{quota="request_rate",user="u",client_id="z"} 0\n'
              'kqp_quota_usage{quota="request_rate",user="u",client_id="z"} 1\n', 0.0)
    assert math.isinf(s.entities[("u", "z", False)].worst)


def test_render_shows_rate_against_limit_in_the_first_row() -> None:
    lines = render(with_rates(parse(TEXT, 2.0), parse(TEXT, 1.0)), "http://x/metrics", width=200)
    table = lines[lines.index("") + 1:]
    assert table[0].split()[:3] == ["USER", "CLIENT_ID", "OVER"]
    first = table[1].split()
    assert first[:3] == ["ANONYMOUS", "hog", "250%"]
    assert "2.4Ki/1000" in first and "50/100" in first and first[-2:] == ["0.00s/s", "2"]
    assert "connections 4  muted 2  delay queue 2" in lines[1]
    assert lines[-1] == LEGEND[:200]


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
    clock = [0.0]
    obs = PrometheusObserver(process_metrics=False, clock=lambda: clock[0])
    obs.request(Principal("ANONYMOUS", "c"), 0, 10)
    obs.produced(Principal("ANONYMOUS", "c"), 1000, 10)
    obs.mute_started(Principal("ANONYMOUS", "c"), "producer_byte_rate")
    clock[0] = 0.5
    s = parse(generate_latest(obs.registry).decode(), 0.0)
    c = s.entities[("ANONYMOUS", "c", False)]
    assert c.muted_seconds == {"producer_byte_rate": 0.5}
    assert c.counters == {"producer_byte_rate": 1000, "producer_record_rate": 10, "request_rate": 1}


def test_once_against_nothing_says_so_and_fails(capsys) -> None:
    assert run_top("http://127.0.0.1:9/metrics", once=True) == 1
    assert "cannot read http://127.0.0.1:9/metrics" in capsys.readouterr().out


def test_empty_scrape_renders() -> None:
    assert render(Scrape(0.0), "u")[0].startswith("kqp top  u")


GROUP = """\
kqp_quota_group_limit{quota="producer_byte_rate",user="",client_id_prefix="etl-"} 100000
kqp_quota_group_usage{quota="producer_byte_rate",user="",client_id_prefix="etl-"} 98500
kqp_quota_limit{quota="producer_byte_rate",user="ANONYMOUS",client_id="spark-job-1"} 200000
kqp_quota_usage{quota="producer_byte_rate",user="ANONYMOUS",client_id="spark-job-1"} 222000
"""
MEMBER = """\
kqp_quota_limit{{quota="producer_byte_rate",user="ANONYMOUS",client_id="{c}"}} 100000
kqp_quota_usage{{quota="producer_byte_rate",user="ANONYMOUS",client_id="{c}"}} 98500
kqp_quota_group_member{{quota="producer_byte_rate",user="",client_id_prefix="etl-",member_user="ANONYMOUS",\
member_client_id="{c}"}} 1
kqp_bytes_total{{direction="produce",user="ANONYMOUS",client_id="{c}"}} {sent}
kqp_muted_seconds_total{{quota="producer_byte_rate",user="ANONYMOUS",client_id="{c}"}} {muted}
kqp_entity_muted_connections{{user="ANONYMOUS",client_id="{c}"}} 1
"""


def etl(at: float, a_sent: int, b_sent: int, a_muted: float, b_muted: float) -> Scrape:
    text = GROUP + MEMBER.format(c="etl-a", sent=a_sent, muted=a_muted) + \
        MEMBER.format(c="etl-b", sent=b_sent, muted=b_muted)
    text += 'kqp_muted_seconds_total{quota="producer_byte_rate",user="ANONYMOUS",client_id="spark-job-1"} ' \
            f'{at * 0.5}\n'
    return parse(text, at)


def test_members_follow_their_group_with_their_own_usage() -> None:
    # Issue 20's frame: etl-a and etl-b each showed the group's 96.2Ki/97.7Ki beside the group's row,
    # so a reader added them up to twice the quota. Over 10 s etl-a sent 600 kB and etl-b 385 kB:
    # 60000 + 38500 = 98500 B/s, the group's rate; etl-a was muted 7 s of the 10, etl-b 9.5 s.
    lines = render(with_rates(etl(10.0, 600_000, 385_000, 7.0, 9.5), etl(0.0, 0, 0, 0.0, 0.0)), "u", width=200)
    table = [line.split() for line in lines[lines.index("") + 1:-1]]
    assert table[1:] == [
        ["ANONYMOUS", "spark-job-1", "111%", "216.8Ki/195.3Ki", "0.50s/s", "0"],
        ["etl-*", "98%", "96.2Ki/97.7Ki", "1.65s/s", "2"],    # the group (no user): its members' sums
        ["ANONYMOUS", "etl-a", "-", "58.6Ki", "0.70s/s", "1"],
        ["ANONYMOUS", "etl-b", "-", "37.6Ki", "0.95s/s", "1"],
    ]
    assert lines[lines.index("") + 4].split("ANONYMOUS", 1)[1].startswith("    etl-a")   # indented


def test_a_member_with_a_quota_of_its_own_keeps_a_row_for_it() -> None:
    text = GROUP + MEMBER.format(c="etl-a", sent=0, muted=0) + \
        'kqp_quota_limit{quota="request_rate",user="ANONYMOUS",client_id="etl-a"} 10\n' \
        'kqp_quota_usage{quota="request_rate",user="ANONYMOUS",client_id="etl-a"} 20\n'
    rows = ordered(parse(text, 0.0))
    shown = [(e.name, None if g is None else g.name) for e, g in rows]
    assert ("etl-a", None) in shown and ("etl-a", "etl-*") in shown
    own = next(e for e, g in rows if e.name == "etl-a" and g is None)
    assert own.worst == 2.0   # its request_rate quota, not the group's byte rate


OBSERVED = TEXT + """\
kqp_quota_observed{quota="producer_byte_rate",user="ANONYMOUS",client_id="slow"} 1
kqp_observed_muted_seconds_total{quota="producer_byte_rate",user="ANONYMOUS",client_id="slow"} 4
"""


def test_observed_quotas_show_their_mode_and_what_they_would_have_throttled() -> None:
    before = parse(OBSERVED, 100.0)
    after = with_rates(parse(OBSERVED.replace("} 4\n", "} 5.5\n"), 102.0), before)
    slow = after.entities[("ANONYMOUS", "slow", False)]
    # (5.5 - 4) s it would have been muted, over 2 s: enforcing would have held it 3/4 of the time.
    assert slow.mode() == "observe" and slow.would_rate() == 0.75
    assert after.entities[("ANONYMOUS", "hog", False)].mode() == "enforce"
    lines = render(after, "http://x/metrics")
    header = next(line for line in lines if line.startswith("USER"))
    assert header.split()[-3:] == ["MODE", "WOULD", "THROTTLE"]
    [row] = [line for line in lines if " slow " in line]
    assert row.split()[-2:] == ["observe", "0.75s/s"]
    assert any(line.startswith("WOULD THROTTLE:") for line in lines)
    assert "MODE" not in "\n".join(render(parse(TEXT, 0.0), "http://x/metrics")), "shown only while observing"
