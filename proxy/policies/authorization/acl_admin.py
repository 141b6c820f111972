"""Kafka's ACL admin API answered by kqp: DescribeAcls, CreateAcls and DeleteAcls.

With authorization on, kqp answers the three itself (forwarded, they would change or show the
upstream's ACLs as kqp's own user), with the semantics of a KRaft broker (AclApis, AclControlManager):
DescribeAcls needs DESCRIBE on the cluster, the other two ALTER, else CLUSTER_AUTHORIZATION_FAILED
(31) for the whole request; `admin.principals` and the super users always may, `admin.describe_principals`
may describe. Each creation is checked as the controller does (INVALID_REQUEST with its message); a
filter naming an UNKNOWN value is INVALID_REQUEST. DeleteAcls lists, per filter, the bindings it
matched among those in force (the config file's and the API's). What changes is committed to
`authorization.state_file` first (`PendingAclCommit`, as quota changes are); without one, creations
and deletions are refused, saying so. Pure: the in-force ACLs are the `AclState`'s authorizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kqp.protocol.apis import ApiKey, kqp_ranges, message_classes
from kqp.protocol.messages import decode_body, response_frame
from kqp.proxy.policies.authorization.checks import CLUSTER_AUTHORIZATION_FAILED, ERRORS, AclState
from kqp.proxy.policies.pending import PendingAclCommit
from kqp.quotas.acls.bindings import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    binding_problem,
)

__all__ = ["ACL_APIS", "AclAdmin"]

ACL_APIS = frozenset({ApiKey.DescribeAcls, ApiKey.CreateAcls, ApiKey.DeleteAcls})
UNKNOWN_SERVER_ERROR, INVALID_REQUEST = -1, 42
NO_STATE_FILE = "kqp keeps no ACL changes: set authorization.state_file (or change authorization.acls in its config)"
_RANGES = kqp_ranges()


def _enum(kind: type, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind.UNKNOWN


def _filter(f: Any) -> AclFilter:
    """A DescribeAcls request or a DeleteAcls filter as an `AclFilter`."""
    return AclFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                     _enum(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
                     _enum(Operation, f.operation), _enum(Permission, f.permission_type))


def _binding(c: Any) -> AclBinding:
    return AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                      _enum(PatternType, c.resource_pattern_type), c.principal, c.host,
                      _enum(Operation, c.operation), _enum(Permission, c.permission_type))


@dataclass(frozen=True)
class AclAdmin:
    acls: AclState
    admins: frozenset[str]                     # admin.principals: may alter and describe
    describers: frozenset[str] = frozenset()   # admin.describe_principals: may describe
    writable: bool = True                      # authorization.state_file is set

    def advertised(self, ranges: Mapping[int, tuple[int, int]]) -> Mapping[int, tuple[int, int]]:
        """kqp answers the three at every version its codec knows, whatever the upstream speaks."""
        return {**ranges, **{api: _RANGES[api] for api in ACL_APIS}}

    def may(self, principal: str, host: str, operation: Operation) -> bool:
        """ALTER (create, delete) or DESCRIBE on the cluster, as kqp grants them."""
        if principal in self.admins or (operation is Operation.DESCRIBE and principal in self.describers):
            return True
        return self.acls.authorizer.authorize(principal, host, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def describe(self, principal: str, host: str, version: int, correlation_id: int, body: memoryview) -> bytes:
        request_cls, response_cls = message_classes(ApiKey.DescribeAcls)
        flt = _filter(decode_body(request_cls, version, body))
        resource = response_cls.fields["resources"].data_class
        acl = resource.fields["acls"].data_class
        if not self.may(principal, host, Operation.DESCRIBE):
            response = response_cls(version=version, error_code=CLUSTER_AUTHORIZATION_FAILED,
                                    error_message=ERRORS[CLUSTER_AUTHORIZATION_FAILED], resources=[])
        elif flt.unknown:
            response = response_cls(version=version, error_code=INVALID_REQUEST,
                                    error_message="The filter must not name an UNKNOWN value", resources=[])
        else:
            grouped: dict[tuple[int, str, int], list[Any]] = {}
            for b in self.acls.authorizer.acls(flt):
                grouped.setdefault((b.resource_type, b.name, b.pattern_type), []).append(acl(
                    version=version, principal=b.principal, host=b.host, operation=b.operation,
                    permission_type=b.permission))
            response = response_cls(version=version, error_code=0, error_message=None, resources=[
                resource(version=version, resource_type=kind, resource_name=name, pattern_type=pattern, acls=acls)
                for (kind, name, pattern), acls in grouped.items()])
        return response_frame(ApiKey.DescribeAcls, version, correlation_id, bytes(response.encode(version=version)))

    def create(self, principal: str, host: str, version: int, correlation_id: int,
               body: memoryview) -> bytes | PendingAclCommit:
        request_cls = message_classes(ApiKey.CreateAcls)[0]
        creations = decode_body(request_cls, version, body).creations
        results: list[tuple[int, str | None]] = []
        valid: list[AclBinding] = []
        for creation in creations:
            binding = _binding(creation)
            if not self.may(principal, host, Operation.ALTER):
                results.append((CLUSTER_AUTHORIZATION_FAILED, ERRORS[CLUSTER_AUTHORIZATION_FAILED]))
            elif (problem := binding_problem(binding)) is not None:
                results.append((INVALID_REQUEST, problem))
            elif not self.writable:
                results.append((INVALID_REQUEST, NO_STATE_FILE))
            else:
                results.append((0, None))
                valid.append(binding)
        answer = partial(_created, version, correlation_id, results)
        if not valid:
            return answer(None)
        return PendingAclCommit(((True, frozenset(valid)),), principal, answer)

    def delete(self, principal: str, host: str, version: int, correlation_id: int,
               body: memoryview) -> bytes | PendingAclCommit:
        request_cls = message_classes(ApiKey.DeleteAcls)[0]
        filters = [_filter(f) for f in decode_body(request_cls, version, body).filters]
        in_force = self.acls.authorizer.bindings
        outcomes: list[tuple[int, str | None, list[AclBinding]]] = []
        for flt in filters:
            if not self.may(principal, host, Operation.ALTER):
                outcomes.append((CLUSTER_AUTHORIZATION_FAILED, ERRORS[CLUSTER_AUTHORIZATION_FAILED], []))
            elif flt.unknown:
                outcomes.append((INVALID_REQUEST, "The filter must not name an UNKNOWN value", []))
            elif not (matched := [b for b in in_force if flt.matches(b)]):
                outcomes.append((0, None, []))
            elif not self.writable:
                outcomes.append((INVALID_REQUEST, NO_STATE_FILE, []))
            else:
                outcomes.append((0, None, matched))
        gone = frozenset(b for _, _, matched in outcomes for b in matched)
        answer = partial(_deleted, version, correlation_id, outcomes)
        if not gone:
            return answer(None)
        return PendingAclCommit(((False, gone),), principal, answer)


def _created(version: int, correlation_id: int, results: list[tuple[int, str | None]], error: str | None) -> bytes:
    """The CreateAcls answer once its commit is done (a failed commit fails the creations it carried)."""
    response_cls = message_classes(ApiKey.CreateAcls)[1]
    result = response_cls.fields["results"].data_class
    if error is not None:
        results = [(UNKNOWN_SERVER_ERROR, f"not created: {error}") if code == 0 else (code, message)
                   for code, message in results]
    body = response_cls(version=version, results=[result(version=version, error_code=code, error_message=message)
                                                  for code, message in results]).encode(version=version)
    return response_frame(ApiKey.CreateAcls, version, correlation_id, bytes(body))


def _deleted(version: int, correlation_id: int, outcomes: list[tuple[int, str | None, list[AclBinding]]],
             error: str | None) -> bytes:
    """The DeleteAcls answer: per filter, its error or the bindings it deleted."""
    response_cls = message_classes(ApiKey.DeleteAcls)[1]
    filter_result = response_cls.fields["filter_results"].data_class
    matching = filter_result.fields["matching_acls"].data_class
    results = []
    for code, message, matched in outcomes:
        if error is not None and matched:
            code, message, matched = UNKNOWN_SERVER_ERROR, f"not deleted: {error}", []
        results.append(filter_result(version=version, error_code=code, error_message=message, matching_acls=[
            matching(version=version, error_code=0, error_message=None, resource_type=b.resource_type,
                     resource_name=b.name, pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                     operation=b.operation, permission_type=b.permission) for b in matched]))
    body = response_cls(version=version, filter_results=results).encode(version=version)
    return response_frame(ApiKey.DeleteAcls, version, correlation_id, bytes(body))

