"""Who a principal is in a pool: the entity it resolves to, the member key, and that entity's share.

Each member is the quota entity a request resolves to. For a pooled quota type T the principal
walks Kafka's precedence (entities.py, prefix levels included) and stops at the first entity that
either sets T itself or names a pool member (an entry with weight, min_share or max_share, or with
nothing but its names: `QuotaSettings.shares`). That entity's sensor key is the member: a
`client_id_prefix` entry is one member (one Spark job, all its executors), a `<default>` entry gives
one member per whatever its key separates, and a principal that reaches no such entity is its own
member with weight 1. An entity that sets another type only does not capture the pool's members.

For cluster scope, `static_keys` lists the members every process can know from the config alone
(a named user, client id or prefix), so that each reads their fleet-wide usage before serving them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kqp.quotas.entities import member_level
from kqp.quotas.model import DEFAULT, EntitySpec, Principal, QuotaKey, QuotaSettings
from kqp.quotas.pools.spec import MemberSelector, MemberShare, PoolSpec

DEFAULT_SHARE = MemberShare()


@dataclass(frozen=True, slots=True)
class Membership:
    """A principal's place in one pool for one type: the member it is charged as."""

    key: QuotaKey
    entity: EntitySpec | None      # None: the principal resolves to no entity and is its own member
    share: MemberShare


def counts_for(settings: QuotaSettings, quota_type: str, entity: EntitySpec) -> bool:
    """Whether `entity` can be a member for `quota_type`: it sets that type, or names a pool member."""
    return entity in settings.shares or entity in settings.by_type.get(quota_type, {})


def share_of(settings: QuotaSettings, entity: EntitySpec | None) -> MemberShare:
    return DEFAULT_SHARE if entity is None else settings.shares.get(entity, DEFAULT_SHARE)


def membership(settings: QuotaSettings, quota_type: str, principal: Principal) -> Membership:
    """The member `principal` is charged as, for `quota_type`, in a pool that selects it."""
    found = member_level(settings, principal, lambda spec: counts_for(settings, quota_type, spec))
    if found is None:
        return Membership(QuotaKey(principal.user, principal.client_id), None, DEFAULT_SHARE)
    entity, key = found
    return Membership(key, entity, share_of(settings, entity))


def static_key(entity: EntitySpec) -> QuotaKey | None:
    """The one member key `entity` gives every principal it takes, or None when the key depends on the
    principal (a `<default>` component: one member per user or per client id)."""
    if DEFAULT in (entity.user, entity.client_id):
        return None
    user = entity.user or ""
    if entity.client_id_prefix is not None:
        return QuotaKey(user, "", entity.client_id_prefix)
    return QuotaKey(user, entity.client_id or "")


def static_keys(settings: QuotaSettings, pool: PoolSpec, quota_type: str) -> dict[QuotaKey, Membership]:
    """Members of `pool` for `quota_type` known from the config: entities with a static key that
    could take some principal the pool selects. An entity shadowed by a more specific one for every
    such principal is listed anyway; it just never shows any usage."""
    out: dict[QuotaKey, Membership] = {}
    for entity in (*settings.entities, *settings.shares):
        key = static_key(entity)
        if key is None or key in out or not counts_for(settings, quota_type, entity):
            continue
        pattern = MemberSelector(entity.user, entity.client_id, entity.client_id_prefix)
        if not pool.members or any(pattern.overlaps(s) for s in pool.members):
            out[key] = Membership(key, entity, share_of(settings, entity))
    return out
