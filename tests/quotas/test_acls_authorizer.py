"""kqp's authorizer decides as Kafka's StandardAuthorizer: the scenarios of Kafka's own
StandardAuthorizerTest (metadata/src/test/java/.../authorizer), replayed on kqp's pure code, plus the
ACL vocabulary (names, filters, the controller's checks) and the admin layer over the config's ACLs."""

from __future__ import annotations

import pytest

from kqp.quotas.acls.admin_layer import EMPTY, AclLayer, create, delete, in_force
from kqp.quotas.acls.authorizer import Authorizer, narrows
from kqp.quotas.acls.bindings import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_problem,
    parse_enum,
)

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
R, W, D, ALL = Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL


def acl(resource: ResourceType, name: str, pattern: PatternType, principal: str, op: Operation,
        permission: Permission = ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(resource, name, pattern, principal, host, op, permission)


def allowed(authorizer: Authorizer, user: str, checks: list[tuple[Operation, ResourceType, str]],
            host: str = "127.0.0.1") -> list[bool]:
    return [authorizer.authorize(f"User:{user}", host, op, kind, name) for op, kind, name in checks]


def test_deny_takes_precedence_also_with_operation_all() -> None:
    authorizer = Authorizer([
        acl(TOPIC, "foo", LITERAL, "User:alice", ALL, DENY),
        acl(TOPIC, "foo", PREFIXED, "User:alice", R),
        acl(TOPIC, "foo", LITERAL, "User:*", ALL, DENY),
        acl(TOPIC, "foo", PREFIXED, "User:*", D),
    ])
    assert allowed(authorizer, "alice", [(W, TOPIC, "foo"), (R, TOPIC, "foo"), (D, TOPIC, "foo"),
                                         (R, TOPIC, "foobar")]) == [False, False, False, True]
    assert allowed(authorizer, "bob", [(D, TOPIC, "foo"), (R, TOPIC, "foo"), (W, TOPIC, "foo"),
                                       (D, TOPIC, "foobaz"), (R, TOPIC, "foobaz")]) == \
        [False, False, False, True, False]


def test_prefixed_and_literal_patterns() -> None:
    authorizer = Authorizer([
        acl(TOPIC, "fooa", PREFIXED, "User:alice", ALL),
        acl(TOPIC, "foobar", LITERAL, "User:bob", ALL),
        acl(TOPIC, "f", PREFIXED, "User:bob", ALL),
    ])
    assert allowed(authorizer, "bob", [(W, TOPIC, "foobarr"), (R, TOPIC, "goobar"), (R, TOPIC, "fooa")]) == \
        [True, False, True]
    assert allowed(authorizer, "alice", [(D, TOPIC, "fooa"), (W, TOPIC, "bar"), (R, TOPIC, "baz")]) == \
        [True, False, False]


def test_an_allow_implies_describe_and_describe_configs_a_deny_does_not() -> None:
    authorizer = Authorizer([
        acl(TOPIC, "a", LITERAL, "User:alice", W),
        acl(TOPIC, "c", LITERAL, "User:alice", Operation.ALTER_CONFIGS),
        acl(TOPIC, "d", LITERAL, "User:alice", R, DENY),
        acl(TOPIC, "d", LITERAL, "User:alice", D),
        acl(TOPIC, "e", LITERAL, "User:alice", Operation.CREATE),
    ])
    assert allowed(authorizer, "alice", [(D, TOPIC, "a"), (R, TOPIC, "a"), (Operation.DESCRIBE_CONFIGS, TOPIC, "c"),
                                         (D, TOPIC, "c"), (D, TOPIC, "d"), (R, TOPIC, "d"),
                                         (D, TOPIC, "e")]) == [True, False, True, False, True, False, False]


def test_the_default_applies_only_where_no_acl_names_the_resource() -> None:
    bindings = [acl(TOPIC, "topic1", LITERAL, "User:Alice", R)]
    closed = Authorizer(bindings, super_users=["User:alice", "User:chris"])
    opened = Authorizer(bindings, super_users=["User:alice", "User:chris"], allow_everyone_if_no_acl_found=True)
    assert allowed(closed, "Bob", [(R, TOPIC, "topic1"), (R, TOPIC, "topic2")]) == [False, False]
    assert allowed(opened, "Bob", [(R, TOPIC, "topic1"), (R, TOPIC, "topic2")]) == [False, True]
    assert allowed(closed, "chris", [(R, TOPIC, "topic1"), (Operation.ALTER, CLUSTER, "kafka-cluster")]) == [True, True]
    assert str(closed.decide("User:Bob", "h", R, TOPIC, "topic1")) == \
        "ACLs name the resource, none allows this principal the operation from this host"
    assert closed.decide("User:Bob", "h", R, TOPIC, "topic2").rule == "default"


def test_hosts_and_the_wildcard_principal_and_resource() -> None:
    authorizer = Authorizer([
        acl(TOPIC, "*", LITERAL, "User:*", R, host="10.0.0.1"),
        acl(GROUP, "g", LITERAL, "User:alice", R, host="127.0.0.1"),
    ])
    assert allowed(authorizer, "bob", [(R, TOPIC, "any")], host="10.0.0.1") == [True]
    assert allowed(authorizer, "bob", [(R, TOPIC, "any")], host="10.0.0.2") == [False]
    assert allowed(authorizer, "alice", [(R, GROUP, "g")]) == [True]
    assert allowed(authorizer, "alice", [(R, GROUP, "g")], host="127.0.0.2") == [False]


def test_decide_names_the_acl_that_decided() -> None:
    deny = acl(TOPIC, "b", PREFIXED, "User:alice", W, DENY)
    authorizer = Authorizer([acl(TOPIC, "b", LITERAL, "User:alice", W), deny])
    decision = authorizer.decide("User:alice", "h", W, TOPIC, "b")
    assert (decision.allowed, decision.binding) == (False, deny)
    assert str(decision) == "denied by ACL Topic:PREFIXED:b User:alice Deny Write from *"


def test_authorized_operations_is_kafkas_bit_field() -> None:
    authorizer = Authorizer([acl(TOPIC, "a", LITERAL, "User:alice", W)])
    # WRITE (4) and the DESCRIBE (8) it implies: 1 << 4 | 1 << 8
    assert authorizer.authorized_operations("User:alice", "h", TOPIC, "a") == 0b1_0001_0000
    assert authorizer.authorized_operations("User:bob", "h", TOPIC, "a") == 0
    assert Authorizer(super_users=["User:root"]).authorized_operations("User:root", "h", TXN, "t") == \
        (1 << Operation.DESCRIBE) | (1 << Operation.WRITE)


@pytest.mark.parametrize(("bindings", "expected"), [
    ([], False),
    ([acl(TOPIC, "a", LITERAL, "User:alice", W)], True),
    ([acl(TOPIC, "a", LITERAL, "User:alice", W), acl(TOPIC, "a", LITERAL, "User:alice", W, DENY)], False),
    ([acl(TOPIC, "abc", LITERAL, "User:alice", W), acl(TOPIC, "ab", PREFIXED, "User:alice", W, DENY)], False),
    ([acl(TOPIC, "abc", PREFIXED, "User:alice", W), acl(TOPIC, "abd", PREFIXED, "User:alice", W, DENY)], True),
    ([acl(TOPIC, "*", LITERAL, "User:*", ALL)], True),
    ([acl(TOPIC, "a", LITERAL, "User:alice", W), acl(TOPIC, "*", LITERAL, "User:alice", W, DENY)], False),
    ([acl(TOPIC, "a", LITERAL, "User:alice", R)], False),
])
def test_authorize_by_resource_type(bindings: list[AclBinding], expected: bool) -> None:
    assert Authorizer(bindings).authorize_by_resource_type("User:alice", "h", W, TOPIC) is expected


def test_super_users_pass_by_resource_type_whatever_denies() -> None:
    authorizer = Authorizer([acl(TOPIC, "*", LITERAL, "User:*", ALL, DENY)], super_users=["User:root"])
    assert authorizer.authorize_by_resource_type("User:root", "h", W, TOPIC)
    assert not authorizer.authorize_by_resource_type("User:alice", "h", W, TOPIC)


def test_filters_match_as_kafkas_acl_binding_filter() -> None:
    lit, pre, wild = (acl(TOPIC, "foobar", LITERAL, "User:a", R), acl(TOPIC, "foo", PREFIXED, "User:a", R),
                      acl(TOPIC, "*", LITERAL, "User:a", R))
    every = [lit, pre, wild]
    assert [b for b in every if AclFilter(TOPIC, "foobar", PatternType.MATCH).matches(b)] == every
    assert [b for b in every if AclFilter(TOPIC, "foobar", PatternType.ANY).matches(b)] == [lit]
    assert [b for b in every if AclFilter(TOPIC, "foo", PREFIXED).matches(b)] == [pre]
    assert [b for b in every if AclFilter(GROUP).matches(b)] == []
    assert [b for b in every if AclFilter(principal="User:b").matches(b)] == []
    assert AclFilter(operation=R, permission=ALLOW, host="*").matches(lit)
    assert AclFilter(pattern_type=PatternType.UNKNOWN).unknown


def test_names_as_kafkas_tools_write_them() -> None:
    assert parse_enum(Operation, "IdempotentWrite") is Operation.IDEMPOTENT_WRITE
    assert parse_enum(Operation, "describe_configs") is Operation.DESCRIBE_CONFIGS
    assert parse_enum(ResourceType, "transactional-id") is ResourceType.TRANSACTIONAL_ID
    with pytest.raises(ValueError, match="must be one of All, Read, Write"):
        parse_enum(Operation, "Any")


@pytest.mark.parametrize(("binding", "problem"), [
    (acl(ResourceType.ANY, "a", LITERAL, "User:a", R), "Invalid resourceType ANY"),
    (acl(TOPIC, "a", PatternType.MATCH, "User:a", R), "Invalid patternType MATCH"),
    (acl(TOPIC, "a", LITERAL, "User:a", Operation.ANY), "Invalid operation ANY"),
    (acl(TOPIC, "a", LITERAL, "User:a", R, Permission.ANY), "Invalid permissionType ANY"),
    (acl(CLUSTER, "c", LITERAL, "User:a", R), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(TOPIC, "", LITERAL, "User:a", R), "Invalid empty resource name"),
    (acl(TOPIC, "a", LITERAL, "alice", R),
     "principal must be Kafka's form Type:Name (User:alice, User:*), got 'alice'"),
    (acl(TOPIC, "a", LITERAL, "User:a", R), None),
])
def test_the_controllers_checks_of_a_new_binding(binding: AclBinding, problem: str | None) -> None:
    assert binding_problem(binding) == problem


def test_the_admin_layer_adds_and_hides_the_config_files_bindings() -> None:
    from_file, new = acl(TOPIC, "a", LITERAL, "User:alice", W), acl(GROUP, "ga", LITERAL, "User:alice", R)
    base = frozenset({from_file})
    layer = create(base, EMPTY, [new, from_file])   # the file's binding is in force already: nothing added
    assert layer == AclLayer(frozenset({new}))
    layer, deleted = delete(base, layer, [AclFilter(principal="User:alice"), AclFilter(GROUP)])
    assert deleted == [sorted([from_file, new]), [new]]
    assert layer == AclLayer(frozenset(), frozenset({from_file})) and in_force(base, layer) == frozenset()
    assert create(base, layer, [from_file]) == EMPTY   # handed back to the file
    # A hidden binding the file no longer has is forgotten.
    assert delete(frozenset(), layer, [])[0] == EMPTY


READ_A = acl(ResourceType.TOPIC, "a", PatternType.LITERAL, "User:alice", Operation.READ)
DENY_B = acl(ResourceType.TOPIC, "b", PatternType.LITERAL, "User:alice", Operation.READ, Permission.DENY)
READ_B = acl(ResourceType.TOPIC, "b", PatternType.LITERAL, "User:alice", Operation.READ)


@pytest.mark.parametrize(("before", "after", "expected"), [
    (Authorizer([READ_A]), Authorizer([READ_A, READ_B]), False),                  # an ALLOW added
    (Authorizer([READ_A]), Authorizer(), True),                                   # an ACL taken away
    (Authorizer([READ_A]), Authorizer([READ_A, DENY_B]), True),                   # a DENY added
    (Authorizer([], ["User:root"]), Authorizer(), True),                          # a super user gone
    (Authorizer([], ["User:root"]), Authorizer([], ["User:root", "User:ops"]), False),
    (Authorizer([], (), True), Authorizer(), True),                               # the default now DENY
    (Authorizer(), Authorizer([], (), True), False),
    (Authorizer([], (), True), Authorizer([READ_A], (), True), True),             # a first ACL on `a`
])
def test_narrows_says_whether_a_change_may_take_something_from_someone(before: Authorizer, after: Authorizer,
                                                                       expected: bool) -> None:
    assert narrows(before, after) is expected
