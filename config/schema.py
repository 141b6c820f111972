"""A small table-driven schema for the YAML file: key -> (check, default).

Each section of the file is a table of :class:`Field`s; :func:`read_section` refuses unknown keys
(with a did-you-mean hint), runs every field's check and returns the values by key. A check is a
function ``(value, path) -> result`` that raises :class:`ConfigError` naming ``path``; the
combinators below build the common ones, and a nested section is itself a check
(:func:`section`). So adding a section (``tls:``, ``sasl:``, ``redis:``) is one table, one
dataclass, and one line in the parent table.

Defaults are written in YAML terms (``"127.0.0.1:19092"``, not a HostPort) and go through the same
check as a value from the file: a default can never be something the file could not say.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kqp.config.errors import ConfigError, shown
from kqp.config.model import MAX_PORT, HostPort, Secret

Check = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Field:
    """One key of a section: how to check it, and its default in YAML terms."""

    check: Check
    default: Any = None


def child(path: str, key: object) -> str:
    """The dotted path of ``key`` inside ``path`` (the top level has the empty path)."""
    return f"{path}.{key}" if path else str(key)


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """A hint for a misspelt ``name``: the closest known name, else the list of known names."""
    known = [str(k) for k in known]
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "expected one of " + ", ".join(known)


def read_section(data: object, path: str, fields: Mapping[str, Field]) -> dict[str, Any]:
    """Check a mapping against ``fields``; absent keys take their default. None reads as empty,
    because YAML gives None for a section header with nothing under it."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a mapping of keys, got {shown(data)}")
    for key in data:
        if key not in fields:
            raise ConfigError(child(path, key), f"unknown key; {did_you_mean(key, fields)}")
    return {key: field.check(data.get(key, field.default), child(path, key)) for key, field in fields.items()}


def section(fields: Mapping[str, Field], build: Callable[..., Any]) -> Check:
    """A check for a nested section whose keys are the keyword arguments of ``build``."""

    def check(value: object, path: str) -> Any:
        return build(**read_section(value, path, fields))

    return check


def optional(check: Check) -> Check:
    """``check``, letting None (an omitted key or an explicit YAML null) through as None."""
    return lambda value, path: None if value is None else check(value, path)


def _is_number(value: object) -> bool:
    # YAML's true/false are ints to Python; a quota of `true` is a mistake, not 1.
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(minimum: int | None = None, maximum: int | None = None, what: str = "an integer") -> Check:
    """An int (not a bool, not a float) within the inclusive bounds."""
    if minimum is not None and maximum is not None:
        wanted = f"{what} in {minimum}..{maximum}"
    elif minimum is not None:
        wanted = f"{what} >= {minimum}"
    else:
        wanted = what

    def check(value: object, path: str) -> int:
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)
        ):
            raise ConfigError(path, f"must be {wanted}, got {shown(value)}")
        return value

    return check


def number(*, minimum: float | None = None, above: float | None = None, note: str = "") -> Check:
    """A finite int or float, at least ``minimum`` or strictly above ``above``; returned as float."""
    if minimum == 0:
        wanted = "a non-negative number"
    elif above == 0:
        wanted = "a positive number"
    elif minimum is not None:
        wanted = f"a number >= {minimum}"
    elif above is not None:
        wanted = f"a number > {above}"
    else:
        wanted = "a number"
    if note:
        wanted += f" ({note})"

    def check(value: object, path: str) -> float:
        if (
            not _is_number(value)
            or not math.isfinite(value)
            or (minimum is not None and value < minimum)
            or (above is not None and value <= above)
        ):
            raise ConfigError(path, f"must be {wanted}, got {shown(value)}")
        return float(value)

    return check


def choice(*options: str) -> Check:
    """One of a few fixed strings."""

    def check(value: object, path: str) -> str:
        if value not in options or not isinstance(value, str):
            raise ConfigError(path, f"must be one of {', '.join(options)}, got {shown(value)}")
        return value

    return check


def boolean(value: object, path: str) -> bool:
    """YAML's true or false; not 0/1, not "yes" in quotes."""
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false, got {shown(value)}")
    return value


def secret(value: object, path: str) -> Secret:
    """A password: a non-empty string, kept in a :class:`Secret`. An error never shows the value."""
    if not isinstance(value, str):
        kind = "a number" if _is_number(value) else type(value).__name__
        raise ConfigError(path, f"must be a string (quote it in YAML), got {kind} (value not shown)")
    if not value:
        raise ConfigError(path, "must not be empty")
    return Secret(value)


def name(value: object, path: str) -> str:
    """A non-empty string, such as a user or client id. Numbers are refused rather than converted:
    `client_id: 007` would otherwise silently become "7"."""
    if not isinstance(value, str):
        hint = f" (quote it: '{value}')" if _is_number(value) else ""
        raise ConfigError(path, f"must be a string{hint}, got {shown(value)}")
    if not value:
        raise ConfigError(path, "must not be empty")
    return value


def host(value: object, path: str) -> str:
    """A host name or IP address without a port; "[::1]" is accepted and stored as "::1"."""
    text = name(value, path).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if not text or any(c.isspace() for c in text):
        raise ConfigError(path, f"must be a host name or IP address, got {shown(value)}")
    if ":" in text:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            raise ConfigError(path, f"must be a host without a port, got {shown(value)}") from None
    return text


def host_port(*, allow_zero_port: bool = False, bare_port_host: str | None = None) -> Check:
    """A ``host:port`` string, parsed by :meth:`HostPort.parse`. With ``bare_port_host``, a port
    alone (``9404``, ``"9404"`` or ``":9404"``) means that host: an endpoint given without a host
    binds there (loopback), never on every interface by accident."""

    def check(value: object, path: str) -> HostPort:
        if bare_port_host is not None and _is_bare_port(value):
            value = f"{bare_port_host}:{str(value).lstrip(':')}"
        if not isinstance(value, str):
            raise ConfigError(path, f"must be a host:port string, got {shown(value)}")
        try:
            return HostPort.parse(value, allow_zero_port=allow_zero_port)
        except ValueError as exc:
            raise ConfigError(path, str(exc)) from None

    return check


def _is_bare_port(value: object) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return value >= 0
    return isinstance(value, str) and value.strip().lstrip(":").isdigit() and value.strip().count(":") <= 1 \
        and value.isascii()


def host_port_list(value: object, path: str) -> tuple[HostPort, ...]:
    """Brokers as a YAML list, or one "h:p,h:p" string as Kafka's bootstrap.servers writes them.
    Absent means empty: the CLI may still supply --upstream."""
    if value is None:
        return ()
    if isinstance(value, str):
        items = [(path, part) for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    else:
        raise ConfigError(path, f"must be a list of host:port, or one 'h:p,h:p' string, got {shown(value)}")
    if not items:
        raise ConfigError(path, "must name at least one broker as host:port")
    check = host_port()
    # dict.fromkeys drops a repeated address but keeps the operator's order.
    return tuple(dict.fromkeys(check(item, item_path) for item_path, item in items))


PORT = integer(1, MAX_PORT, what="a port")


def port_pins(value: object, path: str) -> dict[int, int]:
    """``node id -> port``: for node ids too large for ``broker_port_base + id``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping of broker node id to port, got {shown(value)}")
    node_id = integer(0, what="a broker node id")
    pins: dict[int, int] = {}
    owner: dict[int, int] = {}
    for key, port in value.items():
        node = node_id(key, child(path, key))
        pins[node] = PORT(port, child(path, key))
        if pins[node] in owner:
            raise ConfigError(child(path, key), f"port {port} is already pinned for node {owner[pins[node]]}")
        owner[pins[node]] = node
    return pins


def api_version_caps(value: object, path: str) -> dict[int, int]:
    """``api -> max version``; the api named as Kafka names it (``JoinGroup``) or by its key."""
    from kqp.protocol.apis import API_NAMES

    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping of API name to highest version, got {shown(value)}")
    by_name = {name: key for key, name in API_NAMES.items()}
    caps: dict[int, int] = {}
    for api, version in value.items():
        where = child(path, api)
        if isinstance(api, int) and not isinstance(api, bool) and api in API_NAMES:
            key = api
        elif isinstance(api, str) and api in by_name:
            key = by_name[api]
        else:
            raise ConfigError(where, f"unknown API; {did_you_mean(api, by_name)}")
        caps[key] = integer(0, what="an API version")(version, where)
    return caps



def readable_file(value: object, path: str) -> str:
    """A path to a file kqp can open now (certificates, keys, credential files)."""
    text = name(value, path)
    try:
        with open(text, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(path, f"cannot read {text!r}: {exc.strerror or exc}") from None
    return text
