"""The precedence ladder `kqp explain` shows (entities.ladder), pure: every level for one principal,
which quota types each decides, and why every other level does not.

The ladder must say what resolution does: for any configuration, the level a quota type is matched
at is the entity `resolutions` picks. The eleven levels, most specific first:
    1 /users/u/clients/c  1p /users/u/client-id-prefixes/p  2 /users/u/clients/<default>  3 /users/u
    4 /users/<default>/clients/c  4p /users/<default>/client-id-prefixes/p  5 .../<default>  6 /users/<default>
    7 /clients/c  7p /client-id-prefixes/p  8 /clients/<default>
"""

from __future__ import annotations

import itertools
import random

from kqp.config import quota_settings_from
from kqp.quotas.entities import ladder, resolutions
from kqp.quotas.model import Principal

ALICE = Principal("alice", "spark-job-42-1")
T, C = "producer_byte_rate", "consumer_byte_rate"


def rungs(entities: list[dict[str, object]], principal: Principal = ALICE,
          **section: object) -> dict[str, list[tuple[str, str]]]:
    """level -> [(path, reason)] (prefix levels may hold several)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in ladder(quota_settings_from({"entities": entities, **section}), principal):
        out.setdefault(r.level, []).append((r.path, r.reason))
    return out


def test_every_level_is_listed_with_the_one_that_matched_and_why_the_others_did_not() -> None:
    ladder_ = rungs([{"user": "alice", T: 100}, {"client_id": "spark-job-42-1", T: 50, C: 60},
                     {"user": "<default>", "client_id": "<default>", C: 70}])
    assert list(ladder_) == ["1", "2", "3", "4", "5", "6", "7", "8"], "no prefix configured: no prefix levels"
    assert ladder_["1"] == [("/users/alice/clients/spark-job-42-1", "not configured")]
    # /users/alice (3) decides producer_byte_rate; consumer_byte_rate falls through to level 5.
    assert ladder_["3"][0][1] == "matched: decides producer_byte_rate, one sensor for all the user's clients"
    assert ladder_["5"][0][1] == "matched: decides consumer_byte_rate, one sensor per <user, client id>"
    # /clients/spark-job-42-1 sets both, but both were decided above it.
    assert ladder_["7"][0][1] == "shadowed: sets producer_byte_rate, consumer_byte_rate, which level 3, 5 decided first"


def test_prefix_levels_list_each_configured_prefix_and_whether_it_starts_the_client_id() -> None:
    ladder_ = rungs([{"client_id_prefix": "spark-", T: 10}, {"client_id_prefix": "spark-job-", T: 20},
                     {"client_id_prefix": "etl-", T: 30}, {"user": "alice", "client_id_prefix": "spark-job-42-"}],
                    pools=[{"name": "p", C: 1000, "members": [{"user": "alice"}]}])
    assert [path for path, _ in ladder_["7p"]] == ["/client-id-prefixes/spark-job-", "/client-id-prefixes/spark-",
                                                   "/client-id-prefixes/etl-"]
    reasons = [reason for _, reason in ladder_["7p"]]
    assert reasons[0].startswith("matched: decides producer_byte_rate"), "the longest matching prefix first"
    assert reasons[1] == "shadowed: sets producer_byte_rate, which level 7p decided first"
    assert reasons[2] == "does not apply: the client id does not start with 'etl-'"
    # A prefix entry with no quota of its own names a pool member.
    assert ladder_["1p"] == [("/users/alice/client-id-prefixes/spark-job-42-",
                              "names a pool member and sets no quota of its own")]


def test_an_empty_client_id_or_user_names_only_the_levels_kafka_resolves_it_through() -> None:
    ladder_ = rungs([{"user": "<default>", T: 5}, {"client_id": "<default>", T: 7}], Principal("bob", ""))
    assert ladder_["6"][0][1].startswith("matched")
    for level in ("1", "2", "4", "5", "7", "8"):
        assert ladder_[level][0][1].startswith("does not apply: an empty client id names no client"), level
    anonymous = rungs([{"client_id": "c", T: 5}], Principal("", "c"))
    for level in ("1", "2", "3"):
        assert anonymous[level][0][1] == "does not apply: an empty user names no entity", level
    assert anonymous["7"][0][1].startswith("matched")


def test_the_ladder_matches_what_resolution_picks_for_any_configuration() -> None:
    """Random configurations over every level: each quota type is matched at exactly one rung, the
    one whose entity `resolutions` picks, and a type no level sets is matched nowhere."""
    rng = random.Random(2026)
    users, clients = ("alice", "<default>", None), ("spark-job-42-1", "<default>", None)
    specs = [({"user": u} if u else {}) | ({"client_id": c} if c else {})
             for u, c in itertools.product(users, clients) if u or c]
    specs += [({"user": u} if u else {}) | {"client_id_prefix": p}
              for u in users for p in ("spark-", "spark-job-", "zzz")]
    for _ in range(300):
        chosen = rng.sample(specs, rng.randrange(1, len(specs)))
        entities = [{**s, rng.choice((T, C)): float(rng.randrange(1, 100))} for s in chosen]
        settings = quota_settings_from({"entities": entities})
        for principal in (ALICE, Principal("bob", "spark-job-7"), Principal("alice", "")):
            found = resolutions(settings, principal)
            by_rung = {t: r.path for r in ladder(settings, principal) for t in r.matched}
            assert by_rung == {str(t): res.entity.path for t, res in found.items()}, (entities, principal)
