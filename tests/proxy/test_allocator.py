"""kqp's malloc settings: applied on glibc unless the environment has its own, and what they are for.

The last test replays kqp's allocation pattern in a fresh interpreter (five 256 KiB reads held for
one frame, then freed together, over and over) and counts the minor page faults it costs with
glibc's defaults and with kqp's settings.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from kqp.proxy.tools import allocator

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
needs_glibc = pytest.mark.skipif(not GLIBC, reason="malloc settings are applied on glibc only")

REPLAY = """
import resource, sys
if sys.argv[1] == "tuned":
    from kqp.proxy.tools.allocator import tune_malloc
    assert tune_malloc()

def frame():
    reads = [b"r" * 262144 for _ in range(5)]  # one Fetch response's reads, held until it is whole
    del reads

frame()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    frame()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 100)
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in allocator._OWN_SETTINGS:
        monkeypatch.delenv(name, raising=False)


@needs_glibc
def test_settings_are_applied_on_glibc(clean_env: None) -> None:
    assert allocator.tune_malloc() is True


@needs_glibc
@pytest.mark.parametrize("name", ["MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_environments_own_malloc_settings_win(clean_env: None, monkeypatch: pytest.MonkeyPatch,
                                                   name: str) -> None:
    monkeypatch.setenv(name, "glibc.malloc.trim_threshold=1" if name == "GLIBC_TUNABLES" else "1")
    assert allocator.tune_malloc() is False


def test_other_platforms_are_left_alone(clean_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    assert allocator.tune_malloc() is False


@needs_glibc
def test_freed_reads_are_reused_instead_of_faulted_in_again() -> None:
    env = {k: v for k, v in os.environ.items() if k not in allocator._OWN_SETTINGS}

    def faults_per_frame(mode: str) -> float:
        done = subprocess.run([sys.executable, "-c", REPLAY, mode], capture_output=True, text=True, env=env,
                              timeout=60, check=True)
        return float(done.stdout)

    # 5 x 256 KiB = 320 pages per frame; glibc's defaults fault most of them in again every time.
    assert faults_per_frame("default") > 100
    assert faults_per_frame("tuned") < 5
