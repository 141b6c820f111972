"""Where a running kqp's metrics endpoint is, for the commands that read it (`kqp top`, `kqp explain`).

`--url` names it; `--config FILE` reads `metrics.listen` from kqp's own config file through the config
loader, as `kqp run` reads it, so the command follows the file wherever the endpoint was put. A
wildcard bind is asked on loopback. No endpoint, or a port chosen at start (0), is a config error
naming the key. Under `--workers N` worker i serves on the port + i: the file names worker 0's.
"""

from __future__ import annotations

import argparse

from kqp.config.errors import ConfigError
from kqp.config.loader import load_config
from kqp.config.model import HostPort

__all__ = ["DEFAULT_ADDRESS", "add_flags", "endpoint_url"]

DEFAULT_ADDRESS = "127.0.0.1:9404"
LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1"}   # a wildcard bind, asked where this command runs


def add_flags(parser: argparse.ArgumentParser, path: str) -> None:
    """`--url` or `--config`, one or the other, for the endpoint's `path` (`/metrics`, `/explain`)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", help=f"kqp's {path} on its metrics endpoint (default http://{DEFAULT_ADDRESS}{path})")
    where.add_argument("--config", "-c", metavar="FILE",
                       help="kqp's config file: ask the endpoint its metrics.listen names")


def endpoint_url(args: argparse.Namespace, path: str) -> str:
    """The URL of `path` the flags name; ConfigError when `--config` names no endpoint to ask."""
    if args.url:
        return str(args.url)
    if not args.config:
        return f"http://{DEFAULT_ADDRESS}{path}"
    config = load_config(args.config)
    listen = config.metrics.listen
    if listen is None:
        raise ConfigError("metrics.listen", "not set, so that kqp serves no metrics endpoint; set it, or give --url",
                          config.source)
    if listen.port == 0:
        raise ConfigError("metrics.listen", "port 0 is chosen when kqp starts; give --url with the address kqp "
                                            "logged ('metrics endpoint http://...')", config.source)
    return f"http://{HostPort(LOOPBACK.get(listen.host, listen.host), listen.port)}{path}"
