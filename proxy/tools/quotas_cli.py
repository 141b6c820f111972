"""`kqp quotas describe|alter|history`: Kafka's client quota admin API, for machines without Kafka's
Java tools, and the audit trail's history.

It speaks DescribeClientQuotas and AlterClientQuotas to any Kafka listener, kqp's (with
`admin.manage_quotas`) or a broker's, over kqp's own small client (`UpstreamClient`): plaintext or
TLS, SASL PLAIN or SCRAM, flags or a Kafka-style `--command-config` properties file. Entities are
named as kqp's YAML names them: `--user alice`, `--client-id '<default>'`, `--client-id-prefix
spark-`; in describe, `'*'` matches any name (Kafka's match type 2).

`describe --config kqp.yaml` reads no socket: it lays the state file over the config file's quotas
as kqp does and shows where each value comes from, the one thing the Describe response has no field
for. `history --config kqp.yaml` reads no socket either: the last changes kept beside the state
file (who, source, entity, before, after). Output is a table, or JSON with `--json`. Exit 0 on
success, 1 when the server refused something (each refusal printed), 2 on wrong input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import ssl
import sys
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import AlterClientQuotasRequest as Alter
from kafka.protocol.admin import DescribeClientQuotasRequest as Describe

from kqp.config.errors import ConfigError
from kqp.config.loader import load_config
from kqp.config.model import SASL_MECHANISMS, HostPort, UpstreamSasl
from kqp.protocol.apis import ApiKey
from kqp.protocol.errors import ProtocolError
from kqp.proxy.runtime.state.history import read_history
from kqp.proxy.runtime.state.quota_store import read_state
from kqp.proxy.runtime.upstream_client import UpstreamClient
from kqp.quotas.admin_layer import sources
from kqp.quotas.model import DEFAULT

__all__ = ["add_parser", "run"]

EXIT_REFUSED, EXIT_USAGE = 1, 2
ANY = "*"
Row = dict[str, Any]


def add_parser(sub: argparse._SubParsersAction) -> None:   # type: ignore[type-arg]
    p = sub.add_parser("quotas", help="describe or alter client quotas through Kafka's admin API")
    actions = p.add_subparsers(dest="action", required=True)
    describe = actions.add_parser("describe", help="the quotas in force (DescribeClientQuotas)")
    where = describe.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap", help="HOST:PORT of kqp (or any Kafka listener)")
    where.add_argument("--config", help="kqp's config file: show both layers and each value's source, offline")
    describe.add_argument("--strict", action="store_true", help="only entities with no other entity types")
    alter = actions.add_parser("alter", help="set or remove quotas (AlterClientQuotas)")
    alter.add_argument("--bootstrap", required=True, help="HOST:PORT of kqp (or any Kafka listener)")
    alter.add_argument("--add-config", default="", metavar="K=V[,K=V]",
                       help="quotas to set, e.g. producer_byte_rate=1048576")
    alter.add_argument("--delete-config", default="", metavar="K[,K]", help="quotas to remove")
    alter.add_argument("--validate-only", action="store_true", help="check the change; change nothing")
    history = actions.add_parser("history", help="the last quota changes, from the history beside the state file")
    history.add_argument("--config", required=True, help="kqp's config file (its admin.state_file), offline")
    history.add_argument("--last", type=int, default=0, metavar="N", help="only the last N changes (default all)")
    history.add_argument("--json", action="store_true", help="print the events as JSON instead of a table")
    for q in (describe, alter):
        q.add_argument("--user", help="user name, or '<default>'" + (", or '*' for any" if q is describe else ""))
        q.add_argument("--client-id", help="client id, or '<default>'" + (", or '*' for any" if q is describe else ""))
        q.add_argument("--client-id-prefix", help="kqp's client id prefix entity (YAML's client_id_prefix)"
                                                  + (", or '*' for any" if q is describe else ""))
        q.add_argument("--json", action="store_true", help="print JSON instead of a table")
        q.add_argument("--command-config", help="Kafka client properties: security.protocol, sasl.mechanism, "
                                                "sasl.jaas.config, ssl.ca.location")
        q.add_argument("--sasl-mechanism", choices=SASL_MECHANISMS)
        q.add_argument("--sasl-username")
        q.add_argument("--sasl-password-env", metavar="VAR", help="the environment variable holding the password")
        q.add_argument("--tls", action="store_true", help="connect with TLS")
        q.add_argument("--ca", help="CA bundle that signed the listener's certificate (default: the system's)")
        q.add_argument("--timeout", type=float, default=10.0, help="seconds per step (default 10)")


# -- connection options ----------------------------------------------------------------------------
def _properties(path: str) -> dict[str, str]:
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "!")):
                key, _, value = line.partition("=") if "=" in line else line.partition(":")
                props[key.strip()] = value.strip()
    return props


def _connection(args: argparse.Namespace) -> tuple[Callable[[str], dict[str, object]], UpstreamSasl | None]:
    props = _properties(args.command_config) if args.command_config else {}
    protocol = props.get("security.protocol", "SASL_SSL" if args.tls and args.sasl_mechanism else
                         "SSL" if args.tls else "SASL_PLAINTEXT" if args.sasl_mechanism else "PLAINTEXT").upper()
    sasl = None
    if protocol.startswith("SASL"):
        mechanism = args.sasl_mechanism or props.get("sasl.mechanism", "PLAIN")
        jaas = props.get("sasl.jaas.config", "")
        user = args.sasl_username or _jaas(jaas, "username")
        password = os.environ.get(args.sasl_password_env) if args.sasl_password_env else _jaas(jaas, "password")
        if mechanism not in SASL_MECHANISMS or not user or password is None:
            raise ValueError(f"SASL needs a mechanism of {', '.join(SASL_MECHANISMS)}, a user and a password "
                             "(--sasl-username and --sasl-password-env, or sasl.jaas.config in --command-config)")
        sasl = UpstreamSasl(mechanism, user, password)
    if not protocol.endswith("SSL"):
        return (lambda host: {}), sasl
    context = ssl.create_default_context(cafile=args.ca or props.get("ssl.ca.location"))
    return (lambda host: {"ssl": context, "server_hostname": host}), sasl


def _jaas(jaas: str, key: str) -> str | None:
    found = re.search(rf'\b{key}\s*=\s*"([^"]*)"', jaas)
    return found.group(1) if found else None


async def _call(args: argparse.Namespace, api: int, **fields: Any) -> Any:
    tls, sasl = _connection(args)
    address = HostPort.parse(args.bootstrap)
    async with UpstreamClient(address.host, address.port, args.timeout, tls=tls, sasl=sasl) as client:
        versions = await client.request(ApiKey.ApiVersions, 0)
        top = {k.api_key: k.max_version for k in versions.api_keys}.get(api)
        if top is None:
            raise ConnectionError(f"{args.bootstrap} does not serve {ApiKey(api).name} (is admin.manage_quotas on?)")
        return await client.request(api, min(top, 1), **fields)


# -- describe and alter ----------------------------------------------------------------------------
def _components(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    given = (("user", args.user), ("client-id", args.client_id), ("client-id-prefix", args.client_id_prefix))
    return [(t, None if v == DEFAULT else v) for t, v in given if v is not None]


def _entity(entity: list[tuple[str, str | None]]) -> str:
    return " ".join(f"{t}={DEFAULT if n is None else n}" for t, n in entity)


def _describe(args: argparse.Namespace) -> tuple[list[Row], list[str]]:
    if args.config:
        config = load_config(args.config)
        layer = read_state(config.admin.state_file) if config.admin.state_file else {}
        return [{"entity": spec.path, "quota": key, "value": value, "source": source}
                for spec, key, value, source in sources(config.quotas, layer)], []
    components = [Describe.ComponentData(entity_type=t, match_type=2 if n == ANY else 0 if n is not None else 1,
                                         match=None if n == ANY else n) for t, n in _components(args)]
    response = asyncio.run(_call(args, ApiKey.DescribeClientQuotas, components=components, strict=args.strict))
    if response.error_code:
        return [], [f"error {response.error_code}: {response.error_message}"]
    return [{"entity": _entity([(e.entity_type, e.entity_name) for e in entry.entity]), "quota": v.key,
             "value": v.value} for entry in response.entries or () for v in entry.values], []


def _ops(args: argparse.Namespace) -> list[Any]:
    ops = []
    for item in filter(None, args.add_config.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--add-config: {item!r} is not KEY=VALUE")
        ops.append(Alter.EntryData.OpData(key=key.strip(), value=float(value), remove=False))
    removed = filter(None, args.delete_config.split(","))
    ops += [Alter.EntryData.OpData(key=k.strip(), value=0.0, remove=True) for k in removed]
    if not ops:
        raise ValueError("nothing to alter: give --add-config and/or --delete-config")
    return ops


def _alter(args: argparse.Namespace) -> tuple[list[Row], list[str]]:
    components = _components(args)
    if not components:
        raise ValueError("name the entity: --user and/or --client-id (or --client-id-prefix)")
    entry = Alter.EntryData(entity=[Alter.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in components],
                            ops=_ops(args))
    response = asyncio.run(_call(args, ApiKey.AlterClientQuotas, entries=[entry], validate_only=args.validate_only))
    rows = [{"entity": _entity([(e.entity_type, e.entity_name) for e in r.entity]), "error_code": r.error_code,
             "error_message": r.error_message, "validate_only": args.validate_only} for r in response.entries]
    return rows, [f"{r['entity']}: error {r['error_code']}: {r['error_message']}" for r in rows if r["error_code"]]


def _history(args: argparse.Namespace) -> tuple[list[Row], list[str]]:
    """The audit events kept beside the state file, oldest first (`kqp.proxy.runtime.state.history`)."""
    state_file = load_config(args.config).admin.state_file
    if not state_file:
        raise ValueError(f"{args.config} sets no admin.state_file: the kqp.audit log lines are the only record")
    events, _ = read_history(state_file)   # unreadable lines are skipped here, and dropped at the next change
    events = events[-args.last:] if args.last > 0 else events
    if args.json:
        return events, []
    return [{**event, "who": event.get("who") or "-",
             **{side: ",".join(f"{k}={_cell(v)}" for k, v in (event.get(side) or {}).items()) or "-"
                for side in ("before", "after")}} for event in events], []


def _cell(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else "" if value is None else str(value)


def _table(rows: list[Row]) -> str:
    if not rows:
        return "(none)"
    keys = list(rows[0])
    cells = [[str(k).upper() for k in keys]] + [[_cell(r[k]) for k in keys]
                                                for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(keys))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def run(args: argparse.Namespace) -> int:
    try:
        rows, refusals = {"describe": _describe, "alter": _alter, "history": _history}[args.action](args)
    except (OSError, EOFError, ProtocolError) as exc:
        # Before ValueError: a body that does not parse (BodyError) is the server's fault, not the input's.
        # EOFError covers asyncio.IncompleteReadError (the server hung up mid-answer); OSError covers timeouts.
        print(f"kqp quotas: {getattr(args, 'bootstrap', None)}: {exc or type(exc).__name__}", file=sys.stderr)
        return EXIT_REFUSED
    except (ConfigError, ValueError) as exc:
        print(f"kqp quotas: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    for line in refusals:
        print(line, file=sys.stderr)
    return EXIT_REFUSED if refusals else 0
