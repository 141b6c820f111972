"""kqp's build: the packages pyproject.toml lists, then the request path compiled by mypyc in the
build's tree (`kqp.proxy.tools.hot_path` says which modules and how, and is loaded from its file:
kqp is not importable while it is being built). Where compiling is not possible (no C compiler, no
mypyc, a mypyc error, KQP_COMPILE=0) the install goes on with the Python modules and a record of
why, which kqp logs at start and shows in kqp_build_info. An editable install is not compiled: it
runs the checkout's sources, and a compiled copy would be stale at their first edit (`kqp compile`
compiles a checkout by hand). The wheel is tagged for this platform and Python unless KQP_COMPILE=0.
"""

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HOT_PATH = Path(__file__).resolve().parent / "proxy" / "tools" / "hot_path.py"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        spec = importlib.util.spec_from_file_location("kqp_build_hot_path", HOT_PATH)
        assert spec is not None and spec.loader is not None
        hot_path = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = hot_path   # its dataclasses look their module up
        spec.loader.exec_module(hot_path)
        print(f"kqp: {hot_path.build_at_install(Path(self.build_lib))}", file=sys.stderr)


class PlatformDistribution(Distribution):
    def has_ext_modules(self) -> bool:   # extension modules that setuptools does not build itself
        return os.environ.get("KQP_COMPILE", "").strip() != "0"


setup(cmdclass={"build_py": BuildPy}, distclass=PlatformDistribution)
