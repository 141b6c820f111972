"""`kqp explain --client-id X [--user U]`: why a client is throttled or refused, asked of a running kqp.

It reads `GET /explain?client_id=X&user=U` from kqp's metrics endpoint (`--url`, or `--config` and its
`metrics.listen`: metrics_endpoint.py), the JSON document of `kqp.proxy.observability.explain`, and
prints it as text: the entity that matched at which level and why the others did not, each quota's
limit, rate (the fleet's beside it in shared scope) and mode, who else shares it, the throttles of the
last minutes and their causes (and those observed quotas would have given), the client's connections
(its software, and whether it honours throttles), its requests by API and the group protocols they
show (a share or streams group's member), and its pools; and where kqp authorizes, what the user may
and why its last requests were refused (`--user U` alone asks about the user). `--json` prints the
document as served. Rendering is a pure function of the document, tested without a kqp. Exit 0, 1
when kqp cannot be read, 2 on wrong input.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kqp.config.errors import ConfigError
from kqp.proxy.tools import metrics_endpoint
from kqp.proxy.tools.top import COLUMNS, human

__all__ = ["add_parser", "render", "run"]

EXIT_UNREADABLE, EXIT_USAGE = 1, 2


def add_parser(sub: argparse._SubParsersAction) -> None:   # type: ignore[type-arg]
    p = sub.add_parser("explain", help="why a client is throttled or refused: quotas, throttles, ACLs, refusals")
    p.add_argument("--client-id", help="the client id to explain ('' for an empty one; default '' with --user)")
    p.add_argument("--user", help="its user (default: the user its open connections have, else ANONYMOUS)")
    metrics_endpoint.add_flags(p, "/explain")
    p.add_argument("--json", action="store_true", help="print the JSON document as kqp serves it")


def _unit(quota_type: str) -> str:
    return COLUMNS.get(quota_type, ("", "/s"))[1]


def _rate(value: float | None, quota_type: str) -> str:
    if value is None:
        return "-"
    unit = _unit(quota_type)
    return f"{human(value, unit)}{unit}"


def _member(key: dict[str, str | None]) -> str:
    """A pool member's sensor key as top shows members: `prefix*`, a client id, or all of a user's clients."""
    name = f"{key['client_id_prefix']}*" if key["client_id_prefix"] else key["client_id"] or "(all clients)"
    return f"{name} (user {key['user']})" if key["user"] else name


def _shared(shared: dict[str, Any]) -> str:
    """Who else a shared quota's budget goes to, as one line."""
    what = {"client-id-prefix": "the prefix group's", "user": "the user's", "client-id": "the client id's"}
    names = [f"{o['client_id'] or '(no client id)'} (user {o['user']})" for o in shared["others"]]
    if shared["more"]:
        names.append(f"{shared['more']} more")
    if not names:
        return f"shares {what.get(shared['by'], 'a')} budget; no other member seen lately"
    return f"shares {what.get(shared['by'], 'a')} budget with: {', '.join(names)}"


def render(doc: dict[str, Any]) -> list[str]:
    """The document as lines of text."""
    who = {"given": "", "connection": " (the user of its connections)", "default": " (no connection: default)"}
    lines = [f"kqp explain: client id {doc['client_id']!r}, user {doc['user']!r}{who.get(doc['user_from'], '')}"
             f"  [{doc['scope']} scope, pacing {'on' if doc.get('pacing') else 'off'}]", "", "QUOTAS"]
    for q in doc["quotas"] or []:
        fleet = f"  fleet {_rate(q['fleet_rate'], q['quota_type'])}" if "fleet_rate" in q else ""
        mode = "  OBSERVED (counted, not enforced)" if q.get("mode") == "observe" else ""
        lines.append(f"  {q['quota_type']:<24} limit {_rate(q['limit'], q['quota_type']):<12} "
                     f"rate {_rate(q['rate'], q['quota_type']):<12}{fleet}  from {q['entity']} (level {q['level']})"
                     f"{mode}")
        if (shared := q.get("shared")) is not None:
            lines.append(f"    {_shared(shared)}")
    if not doc["quotas"]:
        lines.append("  none: no entity sets a quota for this principal")
    lines += ["", "PRECEDENCE (most specific first)"]
    width = max((len(r["path"]) for r in doc["ladder"]), default=0)
    lines += [f"  {r['level']:<3} {r['path']:<{width}}  {r['reason']}" for r in doc["ladder"]]
    for title, t, what in (("THROTTLES", doc["throttles"], "in all"),
                           ("WOULD HAVE THROTTLED (observed quotas)", doc.get("observed"), "muted at most")):
        if t is None or (title != "THROTTLES" and not t["count"]):
            continue
        lines += ["", f"{title} (last {t['span_seconds'] / 60:.0f} min): {t['count']}, {t['total_seconds']:.2f} s "
                      f"{what}, largest {t['largest_seconds']:.2f} s"]
        for cause, c in sorted(t["by_cause"].items()):
            lines.append(f"  {cause:<24} {c['count']:>6}  {c['total_seconds']:8.2f} s  "
                         f"largest {c['largest_seconds']:.2f} s")
    if requests := doc.get("requests"):
        groups = doc.get("group_protocols") or []
        member = f"  (a member of {', '.join(f'a {g} group' for g in groups)})" if groups else ""
        lines += ["", f"REQUESTS{member}", "  " + ", ".join(f"{api} {n}" for api, n in requests.items())]
    lines += ["", f"CONNECTIONS ({len(doc['connections'])})"]
    for c in doc["connections"]:
        honours = c["honours_throttles"] + (f" ({c['why_not']})" if c["why_not"] else "")
        muted = f"  muted {c['muted_seconds']:.2f} s more" if c["muted_seconds"] else ""
        lines.append(f"  {c['peer']} on {c['listener']}  {c['software']} {c['software_version']}  "
                     f"honours throttles: {honours}{muted}")
    if doc["pools"]:
        lines += ["", "POOLS"]
    for p in doc["pools"]:
        m, q = p["member"], p["quota_type"]
        lines.append(f"  {p['pool']}  {q}  budget {_rate(p['budget'], q)} (configured "
                     f"{_rate(p['configured_budget'], q)})  usage {_rate(p['usage'], q)}")
        if m["active"]:
            demand = "held by the pool" if m["held"] else _rate(m["demand"], q)
            lines.append(f"    member {_member(m['key'])}: allocation {_rate(m['allocation'], q)}, fair share "
                         f"{_rate(m['fair_share'], q)}, usage {_rate(m['usage'], q)}, demand {demand}, "
                         f"weight {m['weight']:g}")
        else:
            lines.append(f"    member {_member(m['key'])}: not active in the pool now")
        if "class" in p:
            credit = f", burst credit {m['credit']:,.0f}" if m.get("credit") else ""
            lines.append(f"    in class {p['class']}{credit}; classes, highest first:")
            for c in p["classes"]:
                demand = "held" if c["held"] else _rate(c["demand"], q)
                lines.append(f"      {c['name']}: allocation {_rate(c['allocation'], q)}, demand {demand}, delivered "
                             f"{_rate(c['delivered'], q)}, {c['members']} member(s), pre-emptions {c['preemptions']}")
        changes = p["budget_changes"]
        lines.append("    budget changes: " + ("not reported" if changes is None else
                                                 "; ".join(c["text"] for c in changes) or "none"))
    return lines + _authorization(doc.get("authorization"))


def _authorization(auth: dict[str, Any] | None) -> list[str]:
    """What kqp's authorization says of the user: its ACLs, and why its last requests were refused."""
    if auth is None:
        return []
    lines = ["", f"AUTHORIZATION ({auth['principal']})"]
    if auth["super_user"]:
        lines.append("  a super user: may do anything")
    default = "allowed" if auth["allow_everyone_if_no_acl_found"] else "denied"
    lines.append(f"  ACLs naming it or User:* ({len(auth['acls'])}); a resource no ACL names: {default}")
    lines += [f"    {acl}" for acl in auth["acls"]]
    lines.append(f"  refused lately ({len(auth['denials'])}, newest first)")
    lines += [f"    {d['ago_seconds']:.0f} s ago  {d['api']}: {d['operation']} on {d['resource_type']} "
              f"{d['resource_name']!r} from {d['host']}: {d['why']}" for d in auth["denials"]]
    return lines


def run(args: argparse.Namespace) -> int:
    if args.client_id is None and args.user is None:
        print("kqp explain: give --client-id, --user, or both", file=sys.stderr)
        return EXIT_USAGE
    try:
        base = metrics_endpoint.endpoint_url(args, "/explain")
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    query = {"client_id": args.client_id or "", **({"user": args.user} if args.user is not None else {})}
    url = f"{base}?{urllib.parse.urlencode(query)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            doc = json.loads(response.read().decode("utf-8"))
    except (OSError, urllib.error.URLError, ValueError) as exc:
        print(f"cannot read {url}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    print(json.dumps(doc, indent=1) if args.json else "\n".join(render(doc)))
    return 0
