"""Shared code for the end-to-end tests: sockets, names, kqp processes, the wire tap, clients, checks.

Importable as `helpers` because tests/conftest.py sits in tests/ with no package marker, which makes
pytest put tests/ on sys.path.
"""

from .kqp_process import KqpProcess, run_kqp_cli, start_kqp
from .names import unique_group, unique_topic
from .net import free_port, read_until_eof, split_bootstrap, split_host_port, wait_port
from .wire_tap import WireTap

__all__ = [
    "KqpProcess",
    "WireTap",
    "free_port",
    "read_until_eof",
    "run_kqp_cli",
    "split_bootstrap",
    "split_host_port",
    "start_kqp",
    "unique_group",
    "unique_topic",
    "wait_port",
]
