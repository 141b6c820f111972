"""kqp.quotas is pure: no module in it imports a clock, an event loop or a socket."""

from __future__ import annotations

from pathlib import Path

from helpers.imports import imported_roots as _imported_roots

import kqp.quotas

FORBIDDEN = {"time", "asyncio", "socket", "selectors", "uvloop"}
QUOTAS_DIR = Path(kqp.quotas.__file__).parent


def test_the_package_has_the_modules_we_scan() -> None:
    names = {p.relative_to(QUOTAS_DIR).as_posix() for p in QUOTAS_DIR.rglob("*.py")}
    # If the scan found nothing, the purity assertion below would pass vacuously; the sub-packages too.
    assert {"manager.py", "rates/sampled_rate.py", "rates/token_bucket.py", "delay_queue.py", "fleet/ledger.py",
            "pools/ledger.py", "acls/authorizer.py"} <= names


def test_no_quota_module_imports_time_or_asyncio() -> None:
    offenders = {
        path.name: sorted(_imported_roots(path) & FORBIDDEN)
        for path in sorted(QUOTAS_DIR.rglob("*.py"))
        if _imported_roots(path) & FORBIDDEN
    }
    assert offenders == {}


def test_the_scan_would_catch_an_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom asyncio import sleep\n")
    assert _imported_roots(bad) & FORBIDDEN == {"time", "asyncio"}
