"""DescribeClientQuotas and AlterClientQuotas answered by the connection core (`admin.manage_quotas`).

No sockets: a connected core on real parts (helpers.playbook) with a real `QuotaAdmin`. An Alter that
changes something is answered once its commit is done: the core emits `CommitQuotas`, which the test
carries out as the runtime's store would without the file (the admin layer laid over the config
file's quotas, swapped in with `QuotaManager.update_settings`), and answers with `Committed`;
the state file itself is tests/proxy/test_quota_store.py's, the edge's part tests/proxy/test_edge.py's.
Kafka's semantics (ClientQuotasImage.describe, ClientQuotaControlManager.alterClientQuotas) are
stated per case: filters, strict matching, validation errors, removal, validate_only, authorisation.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers.playbook import connected_core
from kafka.protocol.admin import AlterClientQuotasRequest as Alter
from kafka.protocol.admin import DescribeClientQuotasRequest as Describe

from kqp.protocol.api_versions import decode_api_versions_response
from kqp.protocol.apis import ApiKey, kqp_ranges
from kqp.protocol.messages import decode_response, encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.policies.quota_admin import QuotaAdmin
from kqp.quotas.admin_layer import AdminLayer, Change, apply_changes, overlay
from kqp.quotas.manager import QuotaManager

NOW = 100.0
ENTITIES = [
    {"user": "alice", "producer_byte_rate": 1000},
    {"user": "alice", "client_id": "app", "consumer_byte_rate": 2000},
    {"user": "<default>", "request_percentage": 50},
    {"client_id": "app", "producer_byte_rate": 3000},
    {"client_id": "<default>", "request_rate": 100},
    {"user": "alice", "client_id_prefix": "spark-", "producer_byte_rate": 4000, "algorithm": "token_bucket"},
]


class Store:
    """The runtime store's semantics without the file: commits land in `layer`, or fail when told to."""

    def __init__(self, manager: QuotaManager) -> None:
        self.layer, self.fail = {}, False
        self.manager = manager
        self.base = self.manager.settings
        self.commits: list[tuple[tuple[Change, ...], str]] = []

    def commit(self, action: ev.CommitQuotas) -> str | None:
        """Carry the action out; the error `Committed` carries (None: committed)."""
        if self.fail:
            return "disk full"
        self.commits.append((action.changes, action.who))
        self.layer: AdminLayer = apply_changes(self.layer, self.base, action.changes)
        self.manager.update_settings(overlay(self.base, self.layer), NOW)
        return None


def admin_core(principals: tuple[str, ...] = ("User:ANONYMOUS",), quotas: dict[str, Any] | None = None,
               describers: tuple[str, ...] | None = None) -> tuple[Connection, Store]:
    stores: list[Store] = []

    def admin(manager: QuotaManager) -> QuotaAdmin:
        stores.append(Store(manager))
        return QuotaAdmin(frozenset(principals), lambda: manager.settings,
                          None if describers is None else frozenset(describers))

    # An upstream that speaks neither API: kqp still advertises and answers both.
    core = connected_core(quotas if quotas is not None else {"entities": ENTITIES}, admin=admin,
                          api_ranges=lambda: {k: r for k, r in kqp_ranges().items() if k not in (48, 49)})
    STORES[id(core)] = stores[0]   # by id: a compiled core (`kqp compile`) takes no weak reference
    return core, stores[0]


STORES: dict[int, Store] = {}   # the store of each core made here, by the core's id
_ids = iter(range(1, 1 << 30))


def call(core: Connection, api: int, version: int, **fields: Any) -> Any:
    """One request through the core; kqp's answer, decoded (nothing may go upstream). An Alter that
    commits is answered once the core's `Store` has carried the commit out."""
    actions = core.handle(ev.ClientData(NOW, encode_request(api, version, next(_ids), "cli", **fields)))
    commits = [a for a in actions if isinstance(a, ev.CommitQuotas)]
    if commits:
        store = STORES[id(core)]
        assert len(commits) == 1, actions
        assert ev.Mute(ev.MuteReason.COMMIT) in actions and not [a for a in actions if isinstance(a, ev.Send)]
        actions = core.handle(ev.Committed(NOW, store.commit(commits[0])))
    sends = [a for a in actions if isinstance(a, ev.Send)]
    assert [s.side for s in sends] == [ev.Side.CLIENT], actions
    return decode_response(api, version, memoryview(b"".join(sends[0].parts)))


def describe(core: Connection, *components: tuple[str, int, str | None], strict: bool = False,
             version: int = 1) -> Any:
    return call(core, ApiKey.DescribeClientQuotas, version, strict=strict, components=[
        Describe.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components])


def described(core: Connection, *components: tuple[str, int, str | None], strict: bool = False,
              version: int = 1) -> dict[str, dict[str, float]]:
    response = describe(core, *components, strict=strict, version=version)
    assert response.error_code == 0, response
    return {" ".join(f"{e.entity_type}={e.entity_name}" for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def alter(core: Connection, *entries: tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]],
          validate_only: bool = False, version: int = 1) -> list[tuple[int, str | None]]:
    response = call(core, ApiKey.AlterClientQuotas, version, validate_only=validate_only, entries=[
        Alter.EntryData(entity=[Alter.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                        ops=[Alter.EntryData.OpData(key=k, value=v, remove=r) for k, v, r in ops])
        for entity, ops in entries])
    return [(r.error_code, r.error_message) for r in response.entries]


def test_api_versions_lists_both_apis_at_every_version_kqp_knows_whatever_the_upstream_speaks() -> None:
    core, _ = admin_core()
    actions = core.handle(ev.ClientData(NOW, encode_request(ApiKey.ApiVersions, 3, 1, "cli", client_software_name="t",
                                                            client_software_version="1")))
    _, ranges = decode_api_versions_response(memoryview(b"".join(actions[0].parts)), 3)
    assert ranges[ApiKey.DescribeClientQuotas] == ranges[ApiKey.AlterClientQuotas] == (0, 1)


@pytest.mark.parametrize("version", [0, 1])
def test_describe_everything_at_every_version(version: int) -> None:
    core, _ = admin_core()
    assert described(core, version=version) == {
        "client-id=None": {"request_rate": 100.0},     # Kafka names the default None
        "client-id=app": {"producer_byte_rate": 3000.0},
        "user=None": {"request_percentage": 50.0},
        "user=alice": {"producer_byte_rate": 1000.0},
        "user=alice client-id=app": {"consumer_byte_rate": 2000.0},
        "user=alice client-id-prefix=spark-": {"producer_byte_rate": 4000.0},
    }


@pytest.mark.parametrize(("components", "strict", "expected"), [
    ((), True, set()),   # strict with no component: only an entity of no type, and there is none
    ((("user", 0, "alice"),), False, {"user=alice", "user=alice client-id=app", "user=alice client-id-prefix=spark-"}),
    ((("client-id-prefix", 2, None),), False, {"user=alice client-id-prefix=spark-"}),
    ((("client-id-prefix", 0, "spark-"), ("user", 0, "alice")), True, {"user=alice client-id-prefix=spark-"}),
    ((("user", 0, "alice"),), True, {"user=alice"}),
    ((("user", 1, None),), False, {"user=None"}),
    ((("user", 2, None),), True, {"user=alice", "user=None"}),
    ((("client-id", 2, None),), False, {"user=alice client-id=app", "client-id=app", "client-id=None"}),
    ((("client-id", 0, "app"),), True, {"client-id=app"}),
    ((("user", 0, "alice"), ("client-id", 0, "app")), True, {"user=alice client-id=app"}),
    ((("user", 0, "nobody"),), False, set()),
    ((("ip", 2, None),), False, set()),   # kqp enforces no ip quotas: there is no ip entity
])
def test_describe_filters_as_kafka_matches(components: tuple, strict: bool, expected: set[str]) -> None:
    core, _ = admin_core()
    assert set(described(core, *components, strict=strict)) == expected


@pytest.mark.parametrize(("components", "code"), [
    ((("user", 0, "a"), ("user", 2, None)), 42),         # a type twice
    ((("", 2, None),), 42),                              # an empty type
    ((("topic", 2, None),), 35),                         # an unknown type: UNSUPPORTED_VERSION, as Kafka
    ((("user", 0, None),), 42),                          # exact needs a name
    ((("user", 1, "a"),), 42),                           # default takes none
    ((("user", 2, "a"),), 42),                           # any takes none
    ((("user", 7, None),), 42),                          # no such match type
    ((("ip", 2, None), ("user", 2, None)), 42),          # ip with user
])
def test_describe_refuses_a_bad_filter(components: tuple, code: int) -> None:
    core, _ = admin_core()
    response = describe(core, *components)
    assert (response.error_code, response.entries) == (code, None)
    assert response.error_message


@pytest.mark.parametrize("version", [0, 1])
def test_alter_sets_adds_and_removes_and_describe_shows_it(version: int) -> None:
    core, store = admin_core()
    assert alter(core, ([("user", "alice")], [("producer_byte_rate", 2048, False), ("request_rate", 7.5, False)]),
                 ([("user", "bob"), ("client-id", None)], [("consumer_byte_rate", 10, False)]),
                 ([("client-id", None)], [("request_rate", 0, True)]), version=version) == [(0, None)] * 3
    shown = described(core)
    assert shown["user=alice"] == {"producer_byte_rate": 2048.0, "request_rate": 7.5}
    assert shown["user=bob client-id=None"] == {"consumer_byte_rate": 10.0}
    assert "client-id=None" not in shown   # its only quota removed
    assert store.commits[0][1] == "User:ANONYMOUS"
    # ...and the quota manager enforces it: the settings were swapped in.
    assert store.manager.settings.entities[next(e for e in store.manager.settings.entities
                                                if e.path == "/users/alice")]["producer_byte_rate"] == 2048


def test_validate_only_answers_the_same_and_changes_nothing() -> None:
    core, store = admin_core()
    before = described(core)
    assert alter(core, ([("user", "alice")], [("producer_byte_rate", 1, False)]),
                 ([("user", "x")], [("nonsense", 1, False)]), validate_only=True) == [
        (0, None), (42, "Invalid configuration key nonsense")]
    assert described(core) == before and store.commits == []


def test_an_unauthorised_principal_gets_31_on_every_entry_and_changes_nothing() -> None:
    core, store = admin_core(principals=("User:ops",))
    before = described(core)   # Describe stays open
    assert [code for code, _ in alter(core, ([("user", "alice")], [("producer_byte_rate", 1, False)]),
                                      ([("user", "bob")], [("producer_byte_rate", 1, False)]))] == [31, 31]
    assert [code for code, _ in alter(core, ([("user", "alice")], [("producer_byte_rate", 1, False)]),
                                      validate_only=True)] == [31]
    assert described(core) == before and store.commits == []


# The core's client is unauthenticated: User:ANONYMOUS. Unset describe_principals: everyone may read.
@pytest.mark.parametrize(("principals", "describers", "allowed"), [
    (("User:ops",), None, True),                          # unset: open, as before the key existed
    (("User:ops",), ("User:ANONYMOUS",), True),           # listed
    (("User:ANONYMOUS",), (), True),                      # who may alter may read
    (("User:ops",), (), False),                           # set and empty: admins only
    (("User:ops",), ("User:bob", "User:anonymous"), False),   # Kafka's principals are case-sensitive
])
@pytest.mark.parametrize("version", [0, 1])
def test_describe_principals_decide_who_reads(principals: tuple[str, ...], describers: tuple[str, ...] | None,
                                             allowed: bool, version: int) -> None:
    core, _ = admin_core(principals=principals, describers=describers)
    response = describe(core, version=version)
    if allowed:
        assert response.error_code == 0 and len(response.entries) == len(ENTITIES)
    else:   # as a broker answers a principal without DESCRIBE_CONFIGS on the cluster
        assert (response.error_code, response.error_message, response.entries) == (
            31, "Cluster authorization failed.", None)


def test_a_refused_reader_gets_31_before_its_filter_is_looked_at() -> None:
    core, _ = admin_core(principals=("User:ops",), describers=("User:bob",))
    assert describe(core, ("topic", 2, None)).error_code == 31   # a bad filter would be 35 to a reader
    open_core, _ = admin_core(principals=("User:ops",))
    assert describe(open_core, ("topic", 2, None)).error_code == 35


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ([("user", "a")], [("producer_byte_rate", 1.5, False)], "producer_byte_rate cannot be a fractional value."),
    ([("user", "a")], [("producer_byte_rate", 0, False)], "Quota producer_byte_rate must be greater than 0"),
    ([("user", "a")], [("request_rate", -1, False)], "Quota request_rate must be greater than 0"),
    ([("user", "a")], [("bogus", 1, False)], "Invalid configuration key bogus"),
    ([("user", "a")], [("request_rate", 1, False), ("request_rate", 2, False)], "Duplicate quota key request_rate"),
    ([], [("request_rate", 1, False)], "Invalid empty client quota entity"),
    ([("user", "a"), ("user", "b")], [("request_rate", 1, False)],
     "Invalid client quota entity, duplicate entity entry user"),
    ([("ip", "10.0.0.1")], [("connection_creation_rate", 1, False)],
     "kqp does not enforce ip (connection rate) quotas; use user and client-id"),
    ([("group", "g")], [("request_rate", 1, False)], "Unhandled client quota entity type: group"),
    ([("client-id", "")], [("request_rate", 1, False)], "Empty client-id not supported"),
    ([("client-id", "a"), ("client-id-prefix", "b")], [("request_rate", 1, False)],
     "Invalid client quota entity: a quota entity has a client id or a client id prefix, not both"),
    ([("client-id-prefix", None)], [("request_rate", 1, False)],
     "Invalid client quota entity: a client id prefix must be a non-empty literal prefix, not '' or <default>"),
])
def test_a_bad_entry_is_refused_alone_while_the_good_one_applies(entity: list, ops: list, message: str) -> None:
    core, _ = admin_core()
    assert alter(core, (entity, ops), ([("user", "carol")], [("request_percentage", 12.5, False)])) == [
        (42, message), (0, None)]
    assert described(core, ("user", 0, "carol")) == {"user=carol": {"request_percentage": 12.5}}


def test_a_repeated_entity_is_refused_the_second_time() -> None:
    core, _ = admin_core()
    entity = [("user", "carol")]
    assert alter(core, (entity, [("request_rate", 1, False)]), (entity, [("request_rate", 2, False)])) == [
        (0, None), (42, "Ignoring duplicate entity /users/carol")]
    assert described(core, ("user", 0, "carol")) == {"user=carol": {"request_rate": 1.0}}


def test_a_state_file_that_cannot_be_written_fails_every_entry_and_changes_nothing() -> None:
    core, store = admin_core()
    store.fail = True
    before = described(core)
    assert alter(core, ([("user", "alice")], [("producer_byte_rate", 5, False)]),
                 ([("user", "x")], [("bogus", 1, False)])) == [(-1, "not changed: disk full"),
                                                               (42, "Invalid configuration key bogus")]
    assert described(core) == before


def test_without_manage_quotas_the_requests_go_upstream() -> None:
    core = connected_core({"entities": ENTITIES})
    frame = encode_request(ApiKey.DescribeClientQuotas, 1, 9, "cli", components=[], strict=False)
    assert core.handle(ev.ClientData(NOW, frame))[0] == ev.Send(ev.Side.UPSTREAM, (frame,))


def test_request_quotas_still_charge_the_answers_kqp_gives_itself() -> None:
    # request_rate 0.05/s: one request over Kafka's shortest rate window, (11 - 1) x 1 s, is 0.1/s,
    # so kqp's own answer carries a throttle and mutes the client, as a broker's would.
    core, _ = admin_core(quotas={"entities": [{"user": "ANONYMOUS", "request_rate": 0.05}]})
    frame = encode_request(ApiKey.DescribeClientQuotas, 1, 5, "cli", components=[], strict=False)
    actions = core.handle(ev.ClientData(NOW, frame))
    [answer] = [a for a in actions if isinstance(a, ev.Send)]
    response = decode_response(ApiKey.DescribeClientQuotas, 1, memoryview(b"".join(answer.parts)))
    assert response.throttle_time_ms > 0
    assert ev.Mute(ev.MuteReason.THROTTLED) in actions


def test_a_client_id_prefix_entity_is_altered_and_enforced_as_the_yaml_s_would_be() -> None:
    core, store = admin_core()
    entity = [("user", "alice"), ("client-id-prefix", "spark-")]
    assert alter(core, (entity, [("producer_byte_rate", 8000, False)]),
                 ([("client-id-prefix", "etl-")], [("request_rate", 2, False)])) == [(0, None), (0, None)]
    assert described(core, ("client-id-prefix", 2, None)) == {
        "user=alice client-id-prefix=spark-": {"producer_byte_rate": 8000.0},
        "client-id-prefix=etl-": {"request_rate": 2.0}}
    settings = store.manager.settings
    spark = next(e for e in settings.entities if e.client_id_prefix == "spark-")
    assert settings.algorithm_for(spark) == "token_bucket"   # the YAML entry's algorithm stays
    assert alter(core, (entity, [("producer_byte_rate", 0, True)])) == [(0, None)]
    assert spark not in store.manager.settings.entities and not store.manager.settings.algorithms
