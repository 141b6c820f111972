"""`kqp explain` against a running kqp and a throttled client (issue 20, "why is my job slow?").

One raw client, `explain-me`, names its software (ApiVersions v3, KIP-511: `explain-test` 1.0) and
then produces one request at a time as fast as kqp answers, the next request sent the moment the
throttled response is back: it does not wait out its throttles, and kqp sees it send while muted.
Its quota comes from the `client_id_prefix: explain-` entity (level 7p, 20 kB/s), and the same entity
is a member of the pool `shared` (1 MB/s). Short windows (6 x 0.2 s) throttle it within a second.
`/explain` must say all of that: the matched entity and level, why the exact client id's levels did
not match, the limit, the throttles and their cause, the connection's software and that it does not
honour throttles, and the pool with the member's allocation; `kqp explain` prints it as text.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from helpers.kqp_process import run_kqp_cli
from helpers.names import unique_topic
from helpers.observability import start_with_metrics
from helpers.raw_client import RawConnection, Tally
from helpers.topics import ensure_topic
from upstreams.launch import Upstream

from kqp.protocol.apis import ApiKey

pytestmark = pytest.mark.e2e

CLIENT_ID = "explain-me"
QUOTAS: dict[str, Any] = {
    "window_size_seconds": 0.2, "window_count": 6,
    "entities": [{"client_id_prefix": "explain-", "producer_byte_rate": 20_000}],
    "pools": [{"name": "shared", "producer_byte_rate": 1_000_000, "members": [{"client_id_prefix": "explain-"}]}],
}


def explain(base_url: str, **query: str) -> tuple[int, Any]:
    url = f"{base_url}/explain?" + "&".join(f"{k}={v}" for k, v in query.items())
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_explain_says_which_entity_throttles_a_client_why_and_how_it_behaves(kqp: Any, mock_cluster: Upstream) -> None:
    proxy, base_url = start_with_metrics(kqp, mock_cluster, quotas=QUOTAS)
    topic = unique_topic("explain")
    ensure_topic(proxy.bootstrap, topic, 1, upstream_kind=mock_cluster.kind)
    stop, tally = threading.Event(), Tally()

    def produce() -> None:
        with RawConnection(proxy.bootstrap, CLIENT_ID, tally) as boot:
            leader = boot.leader_address(topic)
        with RawConnection(leader, CLIENT_ID, tally) as conn:
            conn.call(ApiKey.ApiVersions, 3, "ApiVersions", client_software_name="explain-test",
                      client_software_version="1.0")
            while not stop.is_set():
                conn.produce(topic, [b"x" * 1000] * 10)   # 10 kB: half a second of quota each

    worker = threading.Thread(target=produce, daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        doc: Any = None
        while time.monotonic() < deadline:
            status, doc = explain(base_url, client_id=CLIENT_ID)
            assert status == 200, doc
            if doc["throttles"]["count"] >= 3 and doc["connections"] and \
                    doc["connections"][0]["honours_throttles"] == "no":
                break
            time.sleep(0.5)
        text = run_kqp_cli("explain", "--client-id", CLIENT_ID, "--url", f"{base_url}/explain")
    finally:
        stop.set()
        worker.join(35)
    assert doc["user"] == "ANONYMOUS" and doc["user_from"] == "connection"
    [quota] = doc["quotas"]
    assert (quota["quota_type"], quota["limit"], quota["entity"], quota["level"]) == \
        ("producer_byte_rate", 20_000, "/client-id-prefixes/explain-", "7p")
    assert quota["rate"] > 0
    reasons = {r["path"]: r["reason"] for r in doc["ladder"]}
    assert reasons["/clients/explain-me"] == "not configured"
    assert reasons["/client-id-prefixes/explain-"].startswith("matched: decides producer_byte_rate")
    throttles = doc["throttles"]
    assert throttles["count"] >= 3 and set(throttles["by_cause"]) == {"producer_byte_rate"}
    assert 0 < throttles["largest_seconds"] <= throttles["total_seconds"]
    [conn] = doc["connections"]
    assert (conn["software"], conn["software_version"], conn["honours_throttles"], conn["why_not"]) == \
        ("explain-test", "1.0", "no", "observed")
    assert conn["listener"] != "bootstrap" and CLIENT_ID in conn["client_ids"]
    [pool] = doc["pools"]
    assert (pool["pool"], pool["quota_type"], pool["configured_budget"]) == ("shared", "producer_byte_rate", 1_000_000)
    assert pool["member"]["active"] and pool["member"]["key"]["client_id_prefix"] == "explain-"
    assert pool["member"]["allocation"] > 0 and pool["budget_changes"] == []   # not adaptive: none
    # The text, as an operator reads it.
    assert text.returncode == 0, text.stderr
    for line in ("/client-id-prefixes/explain-", "honours throttles: no (observed)", "explain-test 1.0",
                 "THROTTLES", "shared  producer_byte_rate"):
        assert line in text.stdout, f"{line!r} not in:\n{text.stdout}"
    # Without a client id: a usage error; an unknown client id: an empty but valid answer.
    assert explain(base_url)[0] == 400
    status, unknown = explain(base_url, client_id="nobody")
    assert status == 200 and unknown["user_from"] == "default" and unknown["connections"] == []
