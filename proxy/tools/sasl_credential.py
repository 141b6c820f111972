"""`kqp sasl-credential`: SCRAM credentials for kqp's users file, so kqp never holds the password.

Prints one user's entry of the users file (`sasl.users_file`): per mechanism RFC 5802's salt,
iteration count, StoredKey and ServerKey, base64 encoded, made by scramp with a fresh random salt.
The password comes from standard input (one line; for scripts and `kubectl create secret`) or, on a
terminal, from a prompt that does not echo and asks twice. It is never printed, nor put on the
command line, where `ps` and shell history would see it.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import sys
from typing import TextIO

import yaml
from scramp import ScramMechanism

from kqp.config.model import SCRAM_MECHANISMS
from kqp.config.sasl_section import MAX_ITERATIONS, MIN_ITERATIONS

__all__ = ["add_parser", "credential_entry", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:   # type: ignore[type-arg]
    p = sub.add_parser("sasl-credential", help="SCRAM credentials for a user of sasl.users_file (password on stdin)",
                       description="Print a users-file entry with SCRAM credentials for USER; the password is "
                                   "read from standard input, or prompted for on a terminal.")
    p.add_argument("--user", required=True, help="the user name clients log in with")
    p.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS,
                   help="SCRAM-SHA-256 and/or SCRAM-SHA-512 (repeat for both; default both)")
    p.add_argument("--iterations", type=int, default=8192,
                   help=f"PBKDF2 iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} (default 8192)")


def credential_entry(user: str, password: str, mechanisms: tuple[str, ...], iterations: int) -> dict[str, object]:
    """`{user: {mechanism: {salt, iterations, stored_key, server_key}}}` as the users file reads it."""
    entry: dict[str, object] = {}
    for mechanism in mechanisms:
        salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(password, iterations)
        entry[mechanism] = {"salt": _b64(salt), "iterations": count, "stored_key": _b64(stored_key),
                            "server_key": _b64(server_key)}
    return {user: entry}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _read_password(stdin: TextIO) -> str:
    if stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ")
        return first
    return stdin.readline().rstrip("\r\n")


def run(args: argparse.Namespace, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        print(f"--iterations: must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}", file=sys.stderr)
        return 2
    try:
        password = _read_password(stdin)
    except (ValueError, EOFError, KeyboardInterrupt) as exc:
        print(f"sasl-credential: no password read ({exc or type(exc).__name__})", file=sys.stderr)
        return 2
    if not password:
        print("sasl-credential: the password is empty", file=sys.stderr)
        return 2
    mechanisms = tuple(dict.fromkeys(args.mechanism or SCRAM_MECHANISMS))
    stdout.write(yaml.safe_dump(credential_entry(args.user, password, mechanisms, args.iterations), sort_keys=False))
    return 0
