"""The ACLs changed through Kafka's admin API, as a layer over the config file's ACLs.

As with quotas (`admin_layer.py`), kqp has two stores: the YAML file's `authorization.acls` (the base,
owned by whoever edits it) and the state file that CreateAcls and DeleteAcls write
(`authorization.state_file`). An `AclLayer` is the state file's content: the bindings the API
added, and the config file's bindings the API deleted (`removed` hides them, whatever the YAML
says, until a CreateAcls of the same binding hands it back). `in_force` is the set the authorizer
is built from. Pure and immutable: a change is computed off to the side and swapped in whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kqp.quotas.acls.bindings import AclBinding, AclFilter

__all__ = ["EMPTY", "AclChange", "AclLayer", "apply", "create", "delete", "in_force", "remove"]


@dataclass(frozen=True)
class AclLayer:
    added: frozenset[AclBinding] = frozenset()
    removed: frozenset[AclBinding] = frozenset()   # config-file bindings the API deleted


EMPTY = AclLayer()
#: One admin change: CreateAcls's bindings (`create` True), or the bindings a DeleteAcls matched.
AclChange = tuple[bool, frozenset[AclBinding]]


def in_force(base: Iterable[AclBinding], layer: AclLayer) -> frozenset[AclBinding]:
    return (frozenset(base) - layer.removed) | layer.added


def create(base: frozenset[AclBinding], layer: AclLayer, bindings: Iterable[AclBinding]) -> AclLayer:
    """`layer` after CreateAcls of `bindings` (creating one in force already changes nothing, as in Kafka)."""
    added, removed = set(layer.added), set(layer.removed)
    for binding in bindings:
        if binding in removed:
            removed.discard(binding)   # the config file's binding is back
        elif binding not in base:
            added.add(binding)
    return AclLayer(frozenset(added), frozenset(removed & base))


def remove(base: frozenset[AclBinding], layer: AclLayer, bindings: Iterable[AclBinding]) -> AclLayer:
    """`layer` without `bindings`: the API's own are dropped, the config file's hidden."""
    gone = frozenset(bindings)
    return AclLayer(layer.added - gone, frozenset((layer.removed | gone) & base))


def apply(base: frozenset[AclBinding], layer: AclLayer, changes: Iterable[AclChange]) -> AclLayer:
    """`layer` after `changes`, in order (what the state file's writer does under its lock)."""
    for creating, bindings in changes:
        layer = create(base, layer, bindings) if creating else remove(base, layer, bindings)
    return layer


def delete(base: frozenset[AclBinding], layer: AclLayer,
           filters: Sequence[AclFilter]) -> tuple[AclLayer, list[list[AclBinding]]]:
    """`layer` after DeleteAcls of `filters`, and the bindings each filter deleted (every filter reads
    the same set in force, so a binding two filters match is listed under both, as in Kafka)."""
    current = sorted(in_force(base, layer))
    deleted = [[b for b in current if flt.matches(b)] for flt in filters]
    return remove(base, layer, (b for found in deleted for b in found)), deleted
