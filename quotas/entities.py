"""Which configured entity's quota applies to a principal, and which sensor it is charged to.

Kafka resolves quotas through eight config levels, most specific first (ClientQuotaManager's
DefaultQuotaCallback); kqp adds client-id prefix entities just below the exact client id of the
same user level, the longest first (the table is in quotas/README.md, "Entity resolution"). So a
group never takes a client an operator named exactly, and a named user's entities come before any
`<default>` user's. Each quota type resolves on its own, as Kafka keeps one quota map per type.

The level that matched decides the sensor (Kafka's quota metric tags). An empty client id (what
Kafka makes of a null one) names no client: Kafka's two steps, `quotaMetricTags` then `quotaLimit`
reading the limit from the tags alone, fold into one here: `/users/u`, else `/users/<default>`, else
none, charged to the user's shared sensor. Resolution runs on every request, so results are cached
per principal on the settings instance (`QuotaSettings.resolution_cache`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from kqp.quotas.model import DEFAULT, EntitySpec, Principal, QuotaKey, QuotaSettings, QuotaType

# Client ids are chosen by clients, so the cache is bounded: past this many principals it starts
# over, which costs one re-resolution per active principal and nothing else.
MAX_CACHED_PRINCIPALS = 65536


class Resolution(NamedTuple):
    """The quota in force for one quota type: the sensor key, the limit, the entity it came from, and
    whether that entity's quotas are observed (their throttles counted, never acted on)."""

    key: QuotaKey
    limit: float
    entity: EntitySpec
    observed: bool = False


Level = tuple[EntitySpec, QuotaKey]

# The levels that name no user or client of their own, made once: a new principal builds only its own.
_DEFAULT_USER = EntitySpec(DEFAULT, None)
_DEFAULT_USER_CLIENT = EntitySpec(DEFAULT, DEFAULT)
_DEFAULT_CLIENT = EntitySpec(None, DEFAULT)


def _groups(settings: QuotaSettings, user: str | None, client: str, key_user: str) -> list[Level]:
    """Levels 1p, 4p or 7p: the configured prefixes of `client` under entity user `user`, longest
    first, each with its group's key. One slice and set lookup per distinct prefix length."""
    found = settings.prefixes.get(user)
    if found is None:
        return []
    lengths, prefixes = found
    return [(EntitySpec(user, None, client[:n]), QuotaKey(key_user, "", client[:n]))
            for n in lengths if n <= len(client) and client[:n] in prefixes]


def _levels(settings: QuotaSettings, principal: Principal, exact: bool = True) -> list[Level]:
    """The levels that can apply to `principal`, most specific first: entity, key.

    ``exact=False`` leaves out the levels naming the client id itself (1, 4, 7): what a prefix
    group as a whole resolves to, for `resolve_key`.
    """
    user, client = principal.user, principal.client_id
    per_user = QuotaKey(user, "")
    # An empty user is not an entity name (EntitySpec refuses ""): levels naming it are skipped.
    named = user != ""
    if client == "":
        # Kafka's quotaLimit for the tags (user, ""): only the user levels can give a limit.
        return ([(EntitySpec(user, None), per_user)] if named else []) + [(_DEFAULT_USER, per_user)]
    per_client = QuotaKey(user, client)
    per_client_id = QuotaKey("", client)
    out: list[Level] = []
    if named:
        if exact:
            out.append((EntitySpec(user, client), per_client))
        out += _groups(settings, user, client, user)
        out += [(EntitySpec(user, DEFAULT), per_client), (EntitySpec(user, None), per_user)]
    if exact:
        out.append((EntitySpec(DEFAULT, client), per_client))
    out += _groups(settings, DEFAULT, client, user)
    out += [(_DEFAULT_USER_CLIENT, per_client), (_DEFAULT_USER, per_user)]
    if exact:
        out.append((EntitySpec(None, client), per_client_id))
    out += _groups(settings, None, client, "")
    out.append((_DEFAULT_CLIENT, per_client_id))
    return out


def member_level(settings: QuotaSettings, principal: Principal,
                 counts: Callable[[EntitySpec], bool]) -> Level | None:
    """The most specific level whose entity `counts` (pools/membership.py: the entity a pool member
    resolves to), or None; the same levels, in the same order, as quota resolution walks."""
    for spec, key in _levels(settings, principal):
        if counts(spec):
            return spec, key
    return None


def _first(settings: QuotaSettings, specs: list[Level]) -> dict[str, Resolution]:
    """Per quota type, the first of `specs` that sets it."""
    found: dict[str, Resolution] = {}
    last: EntitySpec | None = None   # quota types mostly resolve at one level: its mode is read once
    observed = False
    for quota_type, limits in settings.by_type.items():
        for spec, key in specs:
            limit = limits.get(spec)
            if limit is not None:
                if spec is not last:
                    last, observed = spec, settings.observes(spec)
                found[quota_type] = Resolution(key, limit, spec, observed)
                break
    return found


def _resolve_uncached(settings: QuotaSettings, principal: Principal) -> dict[str, Resolution]:
    if not settings.by_type:
        return {}
    return _first(settings, _levels(settings, principal))


def resolutions(settings: QuotaSettings, principal: Principal) -> dict[str, Resolution]:
    """Every quota type that applies to `principal`, resolved; cached per settings instance.

    The returned dict is shared with the cache: treat it as read-only.
    """
    cache = settings.resolution_cache
    found = cache.get(principal)
    if found is None:
        if len(cache) >= MAX_CACHED_PRINCIPALS:
            cache.clear()
        found = cache[principal] = _resolve_uncached(settings, principal)
    return found


def resolve(settings: QuotaSettings, quota_type: QuotaType, principal: Principal) -> tuple[QuotaKey, float] | None:
    """The sensor key and limit of `quota_type` for `principal`, or None when no entity sets it."""
    found = resolutions(settings, principal).get(quota_type)
    return None if found is None else (found.key, found.limit)


def sharing(entity: EntitySpec) -> str:
    """How a matched entity keys its sensor: "client" (one per <user, client-id>), "user" (one per
    user, levels 3 and 6), "client-id" (one per client id, levels 7 and 8) or "client-id-prefix"
    (one per prefix group, per user at levels 1p and 4p, for all users at 7p)."""
    if entity.client_id_prefix is not None:
        return "client-id-prefix"
    if entity.client_id is None:
        return "user"
    if entity.user is None:
        return "client-id"
    return "client"


def resolve_key(settings: QuotaSettings, quota_type: QuotaType, key: QuotaKey) -> Resolution | None:
    """What a sensor keyed `key` resolves to under `settings`, or None if nothing charges it any more.

    Used when settings change, to decide which sensors survive and with which limit. Kafka re-reads
    the limit from the metric tags (DefaultQuotaCallback.quotaLimit). Here a key with a user is
    re-resolved as the principal it names and survives only if that principal still lands on the
    same key, which is the same answer for every principal sharing the key: (user, "") is only
    ever a per-user sensor, since an empty client id resolves through the user levels alone. A key
    without a user (levels 7 and 8) depends only on the client id, as in Kafka; ("", "") has no
    quota, as quotaLimit finds none for empty tags.

    A prefix group's key survives while the group as a whole still resolves to it: the prefix
    itself, taken as a client id, resolved without the levels that name one client id exactly (an
    exact entry takes one member out of the group, not the group away). Without a user that is
    `/client-id-prefixes/<prefix>` alone, as for level 7, or what the empty user resolves to (its
    `/users/<default>/client-id-prefixes/<prefix>` group has the same key).
    """
    limits = settings.by_type.get(quota_type)
    if not limits:
        return None
    prefix = key.client_id_prefix
    if prefix is not None:
        levels = _levels(settings, Principal(key.user, prefix), exact=False)
        candidates = [levels]
        if key.user == "":
            # The key of 7p, and of 4p for the empty user (which names no entity of its own): the
            # group survives if either still resolves to it.
            candidates.insert(0, [(spec, k) for spec, k in levels if spec.user is None])
        for candidate in candidates:
            found = _first(settings, candidate).get(quota_type)
            if found is not None and found.key == key:
                return found
        return None
    if key.user == "":
        if key.client_id == "":
            return None
        for client in (key.client_id, DEFAULT):
            spec = EntitySpec(None, client)
            limit = limits.get(spec)
            if limit is not None:
                return Resolution(key, limit, spec, settings.observes(spec))
        return None
    found = resolutions(settings, Principal(key.user, key.client_id)).get(quota_type)
    if found is None or found.key != key:
        return None
    return found


_SHARED = {"client": "one sensor per <user, client id>", "user": "one sensor for all the user's clients",
           "client-id": "one sensor for every user of the client id", "client-id-prefix": "one sensor for the group"}


class Rung(NamedTuple):
    """One precedence level for one principal, as `kqp explain` shows it: the entity this level
    would name, what such an entity sets, which quota types it decides, and why (or why not)."""

    level: str                     # "1" to "8", or a prefix level "1p", "4p", "7p"
    path: str                      # the entity's config path for this principal
    configured: dict[str, float]   # the quotas an entity at this path sets (empty: none is configured)
    matched: tuple[str, ...]       # the quota types this level decides for the principal
    reason: str


def _candidates(settings: QuotaSettings, principal: Principal) -> list[tuple[str, str, EntitySpec | None, str | None]]:
    """Every level, most specific first: (level, path, its entity, why it cannot apply or None)."""
    user, client = principal.user, principal.client_id
    no_user = None if user != "" else "an empty user names no entity"
    no_client = None if client != "" else ("an empty client id names no client: Kafka resolves it through the user "
                                           "levels (3 and 6) only")

    def rung(level: str, u: str | None, c: str | None, why: str | None, prefix: str | None = None
             ) -> tuple[str, str, EntitySpec | None, str | None]:
        template = EntitySpec(u if u != "" else "<user>", c if c != "" else ("<client-id>" if prefix is None else None),
                              prefix)
        return level, template.path, None if why else template, why

    def prefixed(level: str, u: str | None, why: str | None) -> list[tuple[str, str, EntitySpec | None, str | None]]:
        found = settings.prefixes.get(u)
        out = []
        for prefix in sorted(found[1], key=lambda p: (-len(p), p)) if found else ():
            miss = None if client.startswith(prefix) else f"the client id does not start with {prefix!r}"
            out.append(rung(level, u, None, why or no_client or miss, prefix))
        return out

    return [rung("1", user, client, no_user or no_client), *prefixed("1p", user, no_user),
            rung("2", user, DEFAULT, no_user or no_client), rung("3", user, None, no_user),
            rung("4", DEFAULT, client, no_client), *prefixed("4p", DEFAULT, None),
            rung("5", DEFAULT, DEFAULT, no_client), rung("6", DEFAULT, None, None),
            rung("7", None, client, no_client), *prefixed("7p", None, None), rung("8", None, DEFAULT, no_client)]


def ladder(settings: QuotaSettings, principal: Principal) -> list[Rung]:
    """The whole precedence ladder for `principal`, most specific first, with the quota types each
    level decides (as `resolutions` does) and the reason every other level did not."""
    found = resolutions(settings, principal)
    decided: dict[EntitySpec, list[str]] = {}
    for quota_type, res in found.items():
        decided.setdefault(res.entity, []).append(quota_type)
    candidates = _candidates(settings, principal)
    level_of = {spec: level for level, _, spec, _ in candidates if spec is not None}
    out: list[Rung] = []
    for level, path, spec, why_not in candidates:
        configured = {} if spec is None else {str(t): v for t, v in settings.entities.get(spec, {}).items()}
        matched = tuple(sorted(str(t) for t in decided.get(spec, ()))) if spec is not None else ()
        if why_not is not None:
            reason = f"does not apply: {why_not}"
        elif matched:
            reason = f"matched: decides {', '.join(matched)}, {_SHARED[sharing(spec)]}"   # type: ignore[arg-type]
        elif configured:
            above = sorted({level_of.get(found[t].entity, "?") for t in configured if t in found})
            reason = f"shadowed: sets {', '.join(configured)}, which level {', '.join(above)} decided first"
        elif spec in settings.shares:
            reason = "names a pool member and sets no quota of its own"
        else:
            reason = "not configured"
        out.append(Rung(level, path, configured, matched, reason))
    return out
