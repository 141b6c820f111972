"""Kafka's quota admin API answered by kqp: DescribeClientQuotas and AlterClientQuotas.

With `admin.manage_quotas` the two handlers hand these requests to `QuotaAdmin.describe` and
`QuotaAdmin.alter`, with the semantics of the KRaft controller (ClientQuotaControlManager,
ClientQuotasImage): Describe's filter components and strict mode, Alter's per-entry validation
(an invalid entry is INVALID_REQUEST alone, the valid ones apply; `remove`, `validate_only`), who may
alter (`admin.principals`) and describe (`admin.describe_principals`, everyone while unset), refusals
as CLUSTER_AUTHORIZATION_FAILED before the filter is read. Entity types are `user`, `client-id` and
kqp's own `client-id-prefix`; `ip` quotas are refused (kqp does not enforce them). Quota keys are
Kafka's and kqp's own under its YAML names. What is described is the quotas in force: the config's
with the admin layer over them (`kqp.quotas.admin_layer`). The policy is pure: an Alter that changes
something answers with a `PendingCommit`, which the core asks the runtime to commit (`CommitQuotas`:
the state file written off the loop, the settings swapped as a reload does); the answer is built
from the outcome. README.md ("Managing quotas with Kafka's admin API") is the user's reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from kqp.protocol.apis import ApiKey, kqp_ranges
from kqp.protocol.client_quotas import (
    AlterEntry,
    DescribeFilter,
    decode_alter,
    decode_describe,
    encode_alter_response,
    encode_describe_response,
)
from kqp.quotas.admin_layer import Change
from kqp.quotas.model import DEFAULT, QUOTA_TYPES, EntitySpec, Principal, QuotaSettings, QuotaType

from .pending import PendingCommit

__all__ = ["ADMIN_APIS", "QuotaAdmin"]

ADMIN_APIS = frozenset({ApiKey.DescribeClientQuotas, ApiKey.AlterClientQuotas})
UNKNOWN_SERVER_ERROR, CLUSTER_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION, INVALID_REQUEST = -1, 31, 35, 42
CLUSTER_AUTHORIZATION_MESSAGE = "Cluster authorization failed."   # Kafka's default message for error 31
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
USER, CLIENT_ID, CLIENT_ID_PREFIX, IP = "user", "client-id", "client-id-prefix", "ip"
# Entity type -> the EntitySpec field it names, in the order entities are listed. client-id-prefix
# is kqp's own (a group of client ids sharing one quota), exclusive with client-id.
ENTITY_FIELDS: Mapping[str, str] = {USER: "user", CLIENT_ID: "client_id", CLIENT_ID_PREFIX: "client_id_prefix"}
# Kafka's LONG quota configs: a fractional value is refused.
INTEGRAL = frozenset({QuotaType.PRODUCER_BYTE_RATE, QuotaType.CONSUMER_BYTE_RATE})
_RANGES = kqp_ranges()


Results = list[tuple[int, "str | None", tuple]]   # per Alter entry: error code, message, entity


class Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class QuotaAdmin:
    principals: frozenset[str]                            # Kafka's form: User:ops
    settings: Callable[[], QuotaSettings]                 # the quotas in force
    describers: frozenset[str] | None = None              # None: everyone may describe

    def advertised(self, ranges: Mapping[int, tuple[int, int]]) -> Mapping[int, tuple[int, int]]:
        """kqp answers both APIs at every version its codec knows, whatever the upstream speaks."""
        return {**ranges, **{api: _RANGES[api] for api in ADMIN_APIS}}

    def describe(self, principal: Principal, version: int, correlation_id: int, body: memoryview) -> bytes:
        """kqp's whole DescribeClientQuotas response frame."""
        if not self.may_describe(principal):
            return encode_describe_response(version, correlation_id, CLUSTER_AUTHORIZATION_FAILED,
                                            CLUSTER_AUTHORIZATION_MESSAGE, [])
        try:
            entries = self._describe(decode_describe(version, body))
        except Refused as refused:
            return encode_describe_response(version, correlation_id, refused.code, refused.message, [])
        return encode_describe_response(version, correlation_id, 0, None, entries)

    def alter(self, principal: Principal, version: int, correlation_id: int, body: memoryview) -> bytes | PendingCommit:
        """kqp's whole AlterClientQuotas response frame, or the commit it waits for."""
        entries, validate_only = decode_alter(version, body)
        results, changes = self._alter(principal, entries)
        if not changes or validate_only:
            return encode_alter_response(version, correlation_id, results)
        return PendingCommit(tuple(changes), f"User:{principal.user}",
                             partial(_committed, version, correlation_id, results))

    def may_describe(self, principal: Principal) -> bool:
        who = f"User:{principal.user}"
        return self.describers is None or who in self.describers or who in self.principals

    # -- describe ------------------------------------------------------------------------------
    def _describe(self, flt: DescribeFilter) -> list:
        exact: dict[str, str | None] = {}
        any_name: set[str] = set()
        for c in flt.components:
            if not c.entity_type:
                raise Refused(INVALID_REQUEST, "Invalid empty entity type.")
            if c.entity_type in exact or c.entity_type in any_name:
                raise Refused(INVALID_REQUEST,
                              f"Entity type {c.entity_type} cannot appear more than once in the filter.")
            if c.entity_type not in (*ENTITY_FIELDS, IP):
                raise Refused(UNSUPPORTED_VERSION, f"Unsupported entity type {c.entity_type}")
            if c.match_type == MATCH_EXACT and c.match is None:
                raise Refused(INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            if c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED) and c.match is not None:
                raise Refused(INVALID_REQUEST, f"Request specified match type {c.match_type}, but also specified "
                                               "a match string.")
            if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise Refused(INVALID_REQUEST, f"Unknown match type {c.match_type}")
            if c.match_type == MATCH_SPECIFIED:
                any_name.add(c.entity_type)
            else:
                exact[c.entity_type] = c.match
        if IP in exact or IP in any_name:
            if len(exact) + len(any_name) > 1:
                raise Refused(INVALID_REQUEST, "Invalid entity filter component combination. IP filter component "
                                               "should not be used with user or clientId filter component.")
            return []   # kqp enforces no ip quotas: there is no such entity
        found = []
        for spec, values in sorted(self.settings().entities.items(), key=lambda item: item[0].path):
            entity = _components(spec)
            if flt.strict and len(entity) != len(exact) + len(any_name):
                continue
            named = all(t in entity and entity[t] == name for t, name in exact.items())
            if named and all(t in entity for t in any_name):
                found.append((tuple(entity.items()), sorted(values.items())))
        return found

    # -- alter ---------------------------------------------------------------------------------
    def _alter(self, principal: Principal, entries: list[AlterEntry]) -> tuple[Results, list[Change]]:
        """Each entry's result as the controller validates it, and the changes of the valid ones."""
        if f"User:{principal.user}" not in self.principals:
            return [(CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_MESSAGE, e.entity) for e in entries], []
        results: Results = []
        changes: list[Change] = []
        seen: set[EntitySpec] = set()
        for entry in entries:
            try:
                spec, ops = _entity(entry.entity), _ops(entry)
                if spec in seen:
                    raise Refused(INVALID_REQUEST, f"Ignoring duplicate entity {spec.path}")
                seen.add(spec)
            except Refused as refused:
                results.append((refused.code, refused.message, entry.entity))
                continue
            changes.append((spec, ops))
            results.append((0, None, entry.entity))
        return results, changes


def _committed(version: int, correlation_id: int, results: Results, error: str | None) -> bytes:
    """The Alter answer once its commit is done: a failed commit changed nothing, so every entry that
    was to apply says why (UNKNOWN_SERVER_ERROR, as before a commit could fail); the refused say why not."""
    if error is not None:
        results = [(UNKNOWN_SERVER_ERROR, f"not changed: {error}", entity) if code == 0 else (code, msg, entity)
                   for code, msg, entity in results]
    return encode_alter_response(version, correlation_id, results)


def _components(spec: EntitySpec) -> dict[str, str | None]:
    """An entity as Kafka lists it: {entity type: name, None for the default}."""
    out: dict[str, str | None] = {}
    for entity_type, attr in ENTITY_FIELDS.items():
        name = getattr(spec, attr)
        if name is not None:
            out[entity_type] = None if name == DEFAULT else name
    return out


def _entity(components: tuple[tuple[str, str | None], ...]) -> EntitySpec:
    if not components:
        raise Refused(INVALID_REQUEST, "Invalid empty client quota entity")
    names: dict[str, str] = {}
    for entity_type, name in components:
        if entity_type in names:
            raise Refused(INVALID_REQUEST, f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type == IP:
            raise Refused(INVALID_REQUEST, "kqp does not enforce ip (connection rate) quotas; use user and client-id")
        if entity_type not in ENTITY_FIELDS:
            raise Refused(INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise Refused(INVALID_REQUEST, f"Empty {entity_type} not supported")
        names[ENTITY_FIELDS[entity_type]] = DEFAULT if name is None else name
    try:
        return EntitySpec(**{attr: names.get(attr) for attr in ENTITY_FIELDS.values()})   # type: ignore[arg-type]
    except ValueError as exc:   # a prefix with a client-id, or a default prefix
        raise Refused(INVALID_REQUEST, f"Invalid client quota entity: {exc}") from None


def _ops(entry: AlterEntry) -> dict[str, float | None]:
    ops: dict[str, float | None] = {}
    for key, value, remove in entry.ops:
        if key in ops:
            raise Refused(INVALID_REQUEST, f"Duplicate quota key {key}")
        if remove:   # as the controller: removing a key nobody set changes nothing and is no error
            ops[key] = None
            continue
        if key not in QUOTA_TYPES:
            raise Refused(INVALID_REQUEST, f"Invalid configuration key {key}")
        if not (math.isfinite(value) and value > 0):
            raise Refused(INVALID_REQUEST, f"Quota {key} must be greater than 0")
        if key in INTEGRAL and abs(value % 1.0) > 1e-6:
            raise Refused(INVALID_REQUEST, f"{key} cannot be a fractional value.")
        ops[key] = value
    return ops
