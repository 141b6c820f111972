"""Every request authorized at kqp as a broker would: playbooks on a connected core, no sockets.

The core runs on real parts with authorization on (helpers.playbook `make_core`), the client's user
from its connection (as a TLS principal would be) and its host 10.0.0.7. Each case states what
Kafka's KafkaApis does for the API (the `authHelper.authorize` calls and the errors it answers with)
and checks kqp's: a request allowed goes upstream byte for byte; refused whole, kqp answers with the
broker's error and sends nothing; refused in part, what is allowed goes and kqp puts the refused back
into the upstream's answer; lists show only what the principal may describe. The ACL API is kqp's.
"""

from __future__ import annotations

import uuid
from itertools import count
from typing import Any

import pytest
from helpers.playbook import connecting, make_core, play, topic_cache
from helpers.quota_frames import record_batch

from kqp.protocol.api_versions import decode_api_versions_response
from kqp.protocol.apis import ApiKey, message_classes
from kqp.protocol.headers import encode_response_header, parse_request_header
from kqp.protocol.messages import decode_response, encode_request
from kqp.proxy.connection import events as ev
from kqp.proxy.connection.core import Connection
from kqp.proxy.policies.authorization.checks import Denial
from kqp.quotas.acls.authorizer import Authorizer
from kqp.quotas.acls.bindings import AclBinding, Operation, PatternType, Permission, ResourceType

NOW = 100.0
HOST = "10.0.0.7"
ACLS = [
    {"principal": "User:alice", "operation": "Write", "resource_type": "Topic", "resource_name": "a"},
    {"principal": "User:alice", "operation": "Read", "resource_type": "Group", "resource_name": "ga"},
    {"principal": "User:carol", "operations": ["Read", "Describe"], "resource_type": "Topic", "resource_name": "r",
     "pattern_type": "Prefixed"},
    {"principal": "User:carol", "operation": "Read", "resource_type": "Group", "resource_name": "gc"},
    {"principal": "User:carol", "operation": "Read", "resource_type": "Topic", "resource_name": "rx",
     "permission": "Deny", "host": HOST},
    {"principal": "User:ops", "operation": "Alter", "resource_type": "Cluster"},
]
AUTHORIZATION = {"enabled": True, "super_users": ["User:root"], "acls": ACLS}
_ids = count(1)


def core_of(user: str, denials: list[Denial] | None = None, **config: Any) -> Connection:
    core = make_core(authorization={**AUTHORIZATION, **config.pop("authorization", {})}, denials=denials, **config)
    play(core, [connecting(NOW, user, host=HOST)])
    core.handle(ev.UpstreamConnected(NOW))
    return core


def send(core: Connection, api: int, version: int, **fields: Any) -> tuple[list[ev.Action], int]:
    correlation_id = next(_ids)
    return core.handle(ev.ClientData(NOW, encode_request(api, version, correlation_id, "cli", **fields))), \
        correlation_id


def sent(actions: list[ev.Action], side: ev.Side) -> list[bytes]:
    return [b"".join(a.parts) for a in actions if isinstance(a, ev.Send) and a.side is side]


def upstream_request(actions: list[ev.Action], api: int, version: int) -> Any:
    """The one request kqp forwarded, decoded."""
    [frame] = sent(actions, ev.Side.UPSTREAM)
    assert not sent(actions, ev.Side.CLIENT), actions
    request_cls = message_classes(api)[0]
    view = memoryview(frame)
    return request_cls.decode(bytes(view[parse_request_header(view).body_offset:]), version=version)


def answered(actions: list[ev.Action], api: int, version: int) -> Any:
    """kqp's own answer (nothing went upstream), decoded."""
    assert not sent(actions, ev.Side.UPSTREAM), actions
    [frame] = sent(actions, ev.Side.CLIENT)
    return decode_response(api, version, memoryview(frame))


def respond(core: Connection, api: int, version: int, correlation_id: int, response: Any) -> Any:
    """The upstream answers `response`; what the client gets, decoded."""
    body = bytes(response.encode(version=version))
    head = encode_response_header(api, version, correlation_id)
    frame = len(head + body).to_bytes(4, "big") + head + body
    [out] = sent(core.handle(ev.UpstreamData(NOW, frame)), ev.Side.CLIENT)
    return decode_response(api, version, memoryview(out))


P_REQ, P_RESP = message_classes(ApiKey.Produce)


def produce_fields(*topics: str, acks: int = 1, transactional_id: str | None = None) -> dict[str, Any]:
    data = [P_REQ.TopicProduceData(name=t, partition_data=[
        P_REQ.TopicProduceData.PartitionProduceData(index=0, records=record_batch("v", 2))]) for t in topics]
    return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000, "topic_data": data}


def produce_answer(*topics: str) -> Any:
    part = P_RESP.TopicProduceResponse.PartitionProduceResponse
    return P_RESP(responses=[P_RESP.TopicProduceResponse(name=t, partition_responses=[
        part(index=0, error_code=0, base_offset=7)]) for t in topics], throttle_time_ms=0)


def errors_by_topic(response: Any) -> dict[str, list[int]]:
    return {t.name: [p.error_code for p in t.partition_responses] for t in response.responses}


def test_a_produce_allowed_goes_upstream_byte_for_byte() -> None:
    core = core_of("alice")
    request = encode_request(ApiKey.Produce, 9, 1, "cli", **produce_fields("a"))
    assert sent(core.handle(ev.ClientData(NOW, request)), ev.Side.UPSTREAM) == [request]


def test_a_produce_to_topics_refused_in_part_forwards_the_rest_and_answers_29_for_them() -> None:
    # KafkaApis.handleProduceRequest: filterByAuthorized(WRITE, TOPIC); refused partitions answered
    # TOPIC_AUTHORIZATION_FAILED beside the written ones.
    denials: list[Denial] = []
    core = core_of("alice", denials)
    actions, cid = send(core, ApiKey.Produce, 9, **produce_fields("a", "b"))
    forwarded = upstream_request(actions, ApiKey.Produce, 9)
    assert [t.name for t in forwarded.topic_data] == ["a"]
    assert errors_by_topic(respond(core, ApiKey.Produce, 9, cid, produce_answer("a"))) == {"a": [0], "b": [29]}
    assert [(d.principal, d.host, d.operation, d.resource_type, d.name) for d in denials] == [
        ("User:alice", HOST, Operation.WRITE, ResourceType.TOPIC, "b")]


def test_a_produce_to_refused_topics_alone_is_answered_by_kqp() -> None:
    actions, _ = send(core_of("bob"), ApiKey.Produce, 9, **produce_fields("a"))
    response = answered(actions, ApiKey.Produce, 9)
    assert errors_by_topic(response) == {"a": [29]}
    assert response.responses[0].partition_responses[0].base_offset == -1


def test_an_acks_0_produce_refused_closes_the_connection_as_the_broker_does() -> None:
    core = core_of("alice")
    actions, _ = send(core, ApiKey.Produce, 9, **produce_fields("a", "b", acks=0))
    assert not sent(actions, ev.Side.UPSTREAM)
    assert actions[-1] == ev.Close("authorization_failed", "an acks=0 Produce naming topics User:alice may not write")


def test_a_transactional_produce_needs_write_on_its_transactional_id() -> None:
    actions, _ = send(core_of("alice"), ApiKey.Produce, 9, **produce_fields("a", transactional_id="tx"))
    assert errors_by_topic(answered(actions, ApiKey.Produce, 9)) == {"a": [53]}


M_REQ, M_RESP = message_classes(ApiKey.Metadata)


def metadata_answer(*topics: str, error: int = 0) -> Any:
    return M_RESP(brokers=[M_RESP.MetadataResponseBroker(node_id=1, host="k", port=9092, rack=None)],
                  cluster_id="c", controller_id=1, topics=[
                      M_RESP.MetadataResponseTopic(error_code=error, name=t, topic_id=uuid.uuid4(), is_internal=False,
                                                   partitions=[], authorized_operations=None) for t in topics])


def test_metadata_for_all_topics_lists_only_those_the_principal_may_describe() -> None:
    core = core_of("alice")
    actions, cid = send(core, ApiKey.Metadata, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=True)
    assert sent(actions, ev.Side.UPSTREAM)   # as it came
    response = respond(core, ApiKey.Metadata, 12, cid, metadata_answer("a", "b", "rb"))
    assert [(t.name, t.authorized_operations) for t in response.topics] == [
        ("a", {Operation.WRITE, Operation.DESCRIBE})]   # WRITE implies DESCRIBE
    assert response.brokers[0].port == 19101   # kqp's address all the same


def test_metadata_naming_topics_answers_29_for_the_hidden_ones_and_creates_none_it_may_not() -> None:
    # handleTopicMetadataRequest: unauthorized for DESCRIBE -> TOPIC_AUTHORIZATION_FAILED without an
    # id; a topic alice may not create is not auto-created (29 where it does not exist).
    core = core_of("alice")
    actions, cid = send(core, ApiKey.Metadata, 12, allow_auto_topic_creation=True,
                        include_topic_authorized_operations=False,
                        topics=[M_REQ.MetadataRequestTopic(name=n, topic_id=None) for n in ("a", "b")])
    forwarded = upstream_request(actions, ApiKey.Metadata, 12)
    assert ([t.name for t in forwarded.topics], forwarded.allow_auto_topic_creation) == (["a"], False)
    response = respond(core, ApiKey.Metadata, 12, cid, metadata_answer("a", error=3))
    assert [(t.name, t.error_code, t.topic_id) for t in response.topics] == [("a", 29, None), ("b", 29, None)]


F_REQ, F_RESP = message_classes(ApiKey.Fetch)


def fetch_fields(*topics: str | uuid.UUID, version: int = 12, session: tuple[int, int] = (0, -1)) -> dict[str, Any]:
    key = "topic_id" if version >= 13 else "topic"
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session[0], "session_epoch": session[1], "forgotten_topics_data": [], "rack_id": "",
            "topics": [F_REQ.FetchTopic(**{key: t}, partitions=[F_REQ.FetchTopic.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20, log_start_offset=-1,
                current_leader_epoch=-1, last_fetched_epoch=-1)]) for t in topics]}


def test_a_fetch_goes_with_the_topics_the_principal_may_read_and_answers_29_for_the_others() -> None:
    core = core_of("carol")
    actions, cid = send(core, ApiKey.Fetch, 12, **fetch_fields("r1", "a", "rx"))
    assert [t.topic for t in upstream_request(actions, ApiKey.Fetch, 12).topics] == ["r1"]   # rx: DENY from HOST
    part = F_RESP.FetchableTopicResponse.PartitionData
    answer = F_RESP(throttle_time_ms=0, error_code=0, session_id=5, responses=[F_RESP.FetchableTopicResponse(
        topic="r1", partitions=[part(partition_index=0, error_code=0, high_watermark=2,
                                     records=record_batch("v", 2))])])
    response = respond(core, ApiKey.Fetch, 12, cid, answer)
    assert [(t.topic, [(p.error_code, p.high_watermark) for p in t.partitions]) for t in response.responses] == [
        ("r1", [(0, 2)]), ("a", [(29, -1)]), ("rx", [(29, -1)])]


def test_a_fetch_refused_whole_still_goes_to_keep_its_session_in_step() -> None:
    actions, _ = send(core_of("bob"), ApiKey.Fetch, 12, **fetch_fields("a"))
    assert upstream_request(actions, ApiKey.Fetch, 12).topics == []


def open_session(core: Connection, session_id: int, *topics: str) -> None:
    """A full Fetch (epoch 0) the upstream answers by opening session `session_id`."""
    actions, cid = send(core, ApiKey.Fetch, 12, **fetch_fields(*topics, session=(0, 0)))
    upstream_request(actions, ApiKey.Fetch, 12)
    assert respond(core, ApiKey.Fetch, 12, cid, F_RESP(throttle_time_ms=0, error_code=0, session_id=session_id,
                                                         responses=[])).session_id == session_id


def acl_state(core: Connection) -> Any:
    return core.wiring.handlers[ApiKey.Fetch].authorization.acls


def test_an_incremental_fetch_goes_on_a_session_kqp_saw_opened_while_the_acls_only_grow() -> None:
    core = core_of("carol")
    open_session(core, 77, "r1")
    state = acl_state(core)
    more = AclBinding(ResourceType.TOPIC, "s", PatternType.LITERAL, "User:carol", "*", Operation.READ,
                      Permission.ALLOW)
    state.put(Authorizer([*state.authorizer.bindings, more], state.authorizer.super_users))
    assert state.generation == 0   # nothing taken away: sessions stand
    for epoch in (1, 2):
        actions, cid = send(core, ApiKey.Fetch, 12, **fetch_fields(session=(77, epoch)))
        assert upstream_request(actions, ApiKey.Fetch, 12).session_epoch == epoch
        respond(core, ApiKey.Fetch, 12, cid, F_RESP(throttle_time_ms=0, error_code=0, session_id=77, responses=[]))


def test_a_session_opened_before_the_acls_took_something_away_is_not_found_and_a_full_fetch_follows() -> None:
    core = core_of("carol")
    open_session(core, 77, "r1")
    state = acl_state(core)
    state.put(Authorizer([b for b in state.authorizer.bindings if b.name != "r"], state.authorizer.super_users))
    actions, _ = send(core, ApiKey.Fetch, 12, **fetch_fields(session=(77, 1)))
    answer = answered(actions, ApiKey.Fetch, 12)   # nothing went upstream: the session may hold r1
    assert (answer.error_code, answer.session_id, answer.responses) == (70, 0, [])
    actions, _ = send(core, ApiKey.Fetch, 12, **fetch_fields("r1", session=(77, 0)))   # the client starts again
    assert upstream_request(actions, ApiKey.Fetch, 12).topics == []


def test_an_incremental_fetch_on_a_session_kqp_does_not_know_is_not_found() -> None:
    actions, _ = send(core_of("carol"), ApiKey.Fetch, 12, **fetch_fields(session=(91, 4)))
    assert answered(actions, ApiKey.Fetch, 12).error_code == 70


def test_a_topic_named_by_an_id_is_looked_up_first_then_unknown_ones_are_answered_so() -> None:
    core = core_of("carol")
    known, unknown = uuid.uuid4(), uuid.uuid4()
    topic_cache(core).learn("r1", 1, known)
    actions, _cid = send(core, ApiKey.Fetch, 13, **fetch_fields(known, unknown, version=13))
    assert ev.LookUpTopics() in actions and not sent(actions, ev.Side.UPSTREAM)
    actions = core.handle(ev.TopicsLookedUp(NOW))
    assert [t.topic_id for t in upstream_request(actions, ApiKey.Fetch, 13).topics] == [known]


@pytest.mark.parametrize(("user", "group", "expected"), [("alice", "ga", None), ("alice", "gb", 30),
                                                          ("bob", "ga", 30), ("root", "gb", None)])
def test_joining_a_group_needs_read_on_it(user: str, group: str, expected: int | None) -> None:
    actions, _ = send(core_of(user), ApiKey.JoinGroup, 9, group_id=group, session_timeout_ms=10000,
                      rebalance_timeout_ms=10000, member_id="", group_instance_id=None, protocol_type="consumer",
                      protocols=[], reason=None)
    if expected is None:
        assert sent(actions, ev.Side.UPSTREAM) and not sent(actions, ev.Side.CLIENT)
    else:
        response = answered(actions, ApiKey.JoinGroup, 9)
        assert (response.error_code, response.generation_id, response.member_id) == (30, -1, "")


def test_offset_commit_checks_the_group_then_each_topic() -> None:
    # handleOffsetCommitRequest: READ on the group (30 for every partition), then READ on each topic.
    topic = message_classes(ApiKey.OffsetCommit)[0].OffsetCommitRequestTopic
    topics = [topic(name=t, partitions=[topic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")]) for t in ("r1", "a")]
    fields = {"generation_id_or_member_epoch": 1, "member_id": "m", "group_instance_id": None, "topics": topics}
    response = answered(send(core_of("carol"), ApiKey.OffsetCommit, 8, group_id="gx", **fields)[0],
                        ApiKey.OffsetCommit, 8)
    assert [(t.name, [p.error_code for p in t.partitions]) for t in response.topics] == [("r1", [30]), ("a", [30])]
    core = core_of("carol")
    actions, _ = send(core, ApiKey.OffsetCommit, 8, group_id="gc", **fields)
    assert [t.name for t in upstream_request(actions, ApiKey.OffsetCommit, 8).topics] == ["r1"]


def test_find_coordinator_v4_refuses_each_key_it_may_not_describe() -> None:
    core = core_of("alice")
    actions, cid = send(core, ApiKey.FindCoordinator, 4, key_type=0, coordinator_keys=["ga", "gb"])
    assert upstream_request(actions, ApiKey.FindCoordinator, 4).coordinator_keys == ["ga"]
    resp = message_classes(ApiKey.FindCoordinator)[1]
    answer = resp(coordinators=[resp.Coordinator(key="ga", node_id=1, host="k", port=9092, error_code=0,
                                                 error_message=None)])
    response = respond(core, ApiKey.FindCoordinator, 4, cid, answer)
    assert [(c.key, c.error_code, c.node_id) for c in response.coordinators] == [("ga", 0, 1), ("gb", 30, -1)]


@pytest.mark.parametrize(("user", "expected"), [("alice", None), ("bob", 31)])
def test_an_idempotent_producer_needs_write_on_some_topic(user: str, expected: int | None) -> None:
    # handleInitProducerIdRequest: IDEMPOTENT_WRITE on the cluster, or authorizeByResourceType(WRITE, TOPIC).
    actions, _ = send(core_of(user), ApiKey.InitProducerId, 4, transactional_id=None, transaction_timeout_ms=1,
                      producer_id=-1, producer_epoch=-1)
    if expected is None:
        assert sent(actions, ev.Side.UPSTREAM)
    else:
        assert answered(actions, ApiKey.InitProducerId, 4).error_code == expected


def test_list_groups_shows_only_the_groups_the_principal_may_describe() -> None:
    core = core_of("alice")
    _actions, cid = send(core, ApiKey.ListGroups, 4, states_filter=[])
    resp = message_classes(ApiKey.ListGroups)[1]
    answer = resp(error_code=0, groups=[resp.ListedGroup(group_id=g, protocol_type="consumer", group_state="Stable")
                                        for g in ("ga", "gb")])
    assert [g.group_id for g in respond(core, ApiKey.ListGroups, 4, cid, answer).groups] == ["ga"]


def test_a_super_user_passes_everything_untouched() -> None:
    core = core_of("root")
    request = encode_request(ApiKey.Metadata, 12, 1, "cli", topics=None, allow_auto_topic_creation=True,
                             include_topic_authorized_operations=False)
    assert sent(core.handle(ev.ClientData(NOW, request)), ev.Side.UPSTREAM) == [request]


def test_an_api_kqp_cannot_authorize_is_for_super_users_alone() -> None:
    # DescribeDelegationToken has no schema kqp decodes: its tokens would be kqp's own user's.
    request = encode_request(ApiKey.ListOffsets, 1, 1, "cli", replica_id=-1, topics=[])
    header_only = request[:6] + (0).to_bytes(2, "big") + request[8:]   # v0: passed on its header alone
    core = core_of("alice")
    actions = core.handle(ev.ClientData(NOW, header_only))
    assert actions[-1].reason == "authorization_failed" and "super users alone" in actions[-1].message
    assert sent(core_of("root").handle(ev.ClientData(NOW, header_only)), ev.Side.UPSTREAM) == [header_only]


def test_api_versions_offers_only_what_kqp_can_authorize_and_the_acl_api() -> None:
    actions, _ = send(core_of("alice"), ApiKey.ApiVersions, 3, client_software_name="t", client_software_version="1")
    _, ranges = decode_api_versions_response(memoryview(sent(actions, ev.Side.CLIENT)[0]), 3)
    assert ranges[ApiKey.ListOffsets][0] == 1 and ApiKey.CreateDelegationToken not in ranges
    assert ApiKey.ConsumerGroupHeartbeat not in ranges
    assert ranges[ApiKey.CreateAcls] == ranges[ApiKey.DescribeAcls] == ranges[ApiKey.DeleteAcls] == (1, 3)


# -- the ACL admin API ---------------------------------------------------------------------------------

C_REQ = message_classes(ApiKey.CreateAcls)[0]


def creation(principal: str, op: int, name: str = "t", kind: int = 2, pattern: int = 3) -> Any:
    return C_REQ.AclCreation(resource_type=kind, resource_name=name, resource_pattern_type=pattern,
                             principal=principal, host="*", operation=op, permission_type=3)


def test_create_acls_needs_alter_on_the_cluster() -> None:
    actions, _ = send(core_of("alice"), ApiKey.CreateAcls, 3, creations=[creation("User:x", 3)])
    assert [(r.error_code, r.error_message) for r in answered(actions, ApiKey.CreateAcls, 3).results] == [
        (31, "Cluster authorization failed.")]


def test_create_acls_by_one_who_may_alter_the_cluster_is_committed_then_answered() -> None:
    core = core_of("ops", authorization={"state_file": "/tmp/acl-state.yaml"})
    actions, _ = send(core, ApiKey.CreateAcls, 3, creations=[
        creation("User:bob", Operation.READ), creation("bob", Operation.READ), creation("User:bob", 3, kind=4)])
    commits = [a for a in actions if isinstance(a, ev.CommitAcls)]
    assert [c.who for c in commits] == ["User:ops"] and not sent(actions, ev.Side.CLIENT)
    [(creating, bindings)] = commits[0].changes
    assert creating and [str(b) for b in bindings] == ["Topic:LITERAL:t User:bob Allow Read from *"]
    [frame] = sent(core.handle(ev.Committed(NOW)), ev.Side.CLIENT)
    response = decode_response(ApiKey.CreateAcls, 3, memoryview(frame))
    assert [r.error_code for r in response.results] == [0, 42, 42]
    assert response.results[2].error_message == "The only valid name for the CLUSTER resource is kafka-cluster"


def test_describe_and_delete_acls_read_the_acls_in_force() -> None:
    core = core_of("root", authorization={"state_file": "/tmp/acl-state.yaml"})
    actions, _ = send(core, ApiKey.DescribeAcls, 3, resource_type_filter=2, resource_name_filter="rx",
                      pattern_type_filter=2, principal_filter=None, host_filter=None, operation=1, permission_type=1)
    response = answered(actions, ApiKey.DescribeAcls, 3)
    assert sorted((r.resource_name, r.pattern_type, a.operation, a.permission_type) for r in response.resources
                  for a in r.acls) == [("r", 4, 3, 3), ("r", 4, 8, 3), ("rx", 3, 3, 2)]   # MATCH: prefixes too
    f_req = message_classes(ApiKey.DeleteAcls)[0]
    actions, _ = send(core, ApiKey.DeleteAcls, 3, filters=[f_req.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter="User:alice",
        host_filter=None, operation=1, permission_type=1)])
    [(creating, gone)] = next(a for a in actions if isinstance(a, ev.CommitAcls)).changes
    assert not creating and len(gone) == 2
    [frame] = sent(core.handle(ev.Committed(NOW)), ev.Side.CLIENT)
    [result] = decode_response(ApiKey.DeleteAcls, 3, memoryview(frame)).filter_results
    assert sorted(m.resource_name for m in result.matching_acls) == ["a", "ga"]


def test_metadata_naming_only_refused_topics_still_asks_the_upstream_for_its_brokers() -> None:
    # The broker answers its brokers and cluster id whatever topics are refused: a client whose answer
    # had none (the Java consumer's leader refreshing its metadata) waits for one forever.
    core = core_of("bob")
    actions, cid = send(core, ApiKey.Metadata, 12, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False,
                        topics=[M_REQ.MetadataRequestTopic(name="a", topic_id=None)])
    assert upstream_request(actions, ApiKey.Metadata, 12).topics == []
    response = respond(core, ApiKey.Metadata, 12, cid, metadata_answer())
    assert [(b.node_id, b.port) for b in response.brokers] == [(1, 19101)]
    assert [(t.name, t.error_code) for t in response.topics] == [("a", 29)]
