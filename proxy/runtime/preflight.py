"""Everything `kqp run` refuses from its config alone, checked before anything starts.

`kqp run` and `kqp check-config` call the same `preflight`, so a file the check passes is a file the
run takes (ports that another process holds, and an upstream that does not answer, are found only
by running). Each refusal is a `ConfigError`: one line naming the key or flag.
"""

from __future__ import annotations

from kqp.config.model import ProxyConfig
from kqp.proxy.runtime.fleet.sync import cluster_password
from kqp.proxy.runtime.state.acl_store import open_acl_state
from kqp.proxy.runtime.state.quota_store import open_state
from kqp.proxy.tls.contexts import check_tls

from .workers import check_workers


def preflight(config: ProxyConfig, workers: int = 1) -> None:
    """Refuse, as `ConfigError`, what would stop `kqp run --workers workers` with this config."""
    check_workers(config, workers)
    check_tls(config)   # a certificate or key that does not load
    if config.fleet.scope == "cluster":
        cluster_password(config.fleet.cluster)   # a password variable that is not set
    admin = config.admin
    if admin.manage_quotas and admin.state_file is not None:
        open_state(admin.state_file)   # a directory kqp cannot write in, or a file that does not load
    if config.authorization.enabled and config.authorization.state_file is not None:
        open_acl_state(config.authorization.state_file)   # the same for the ACL state file
