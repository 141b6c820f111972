"""Where `kqp top` and `kqp explain` ask: `--url`, else `--config`'s metrics.listen read as `kqp run`
reads it, else the default port; a file that names no endpoint to ask is one line naming the key."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from kqp.config.errors import ConfigError
from kqp.proxy.tools.metrics_endpoint import endpoint_url


def flags(url: str | None = None, config: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(url=url, config=None if config is None else str(config))


def config_file(tmp_path: Path, metrics: dict[str, object] | None) -> Path:
    path = tmp_path / "kqp.yaml"
    path.write_text(yaml.safe_dump({"upstream": {"bootstrap_servers": ["127.0.0.1:9092"]},
                                    **({"metrics": metrics} if metrics is not None else {})}))
    return path


@pytest.mark.parametrize(("listen", "url"), [
    ("127.0.0.1:9500", "http://127.0.0.1:9500/metrics"),
    (9501, "http://127.0.0.1:9501/metrics"),                  # a port alone binds loopback, as kqp run does
    ("0.0.0.0:9502", "http://127.0.0.1:9502/metrics"),        # a wildcard bind is asked on loopback
    ("[::]:9503", "http://[::1]:9503/metrics"),
    ("kqp-metrics.internal:9504", "http://kqp-metrics.internal:9504/metrics"),
])
def test_the_config_file_names_the_endpoint(tmp_path: Path, listen: object, url: str) -> None:
    assert endpoint_url(flags(config=config_file(tmp_path, {"listen": listen})), "/metrics") == url


def test_the_url_and_else_the_default_port(tmp_path: Path) -> None:
    assert endpoint_url(flags(url="http://10.0.0.7:9999/explain"), "/explain") == "http://10.0.0.7:9999/explain"
    assert endpoint_url(flags(), "/explain") == "http://127.0.0.1:9404/explain"


@pytest.mark.parametrize(("metrics", "said"), [
    (None, "metrics.listen: not set, so that kqp serves no metrics endpoint; set it, or give --url"),
    ({"listen": "127.0.0.1:0"}, "metrics.listen: port 0 is chosen when kqp starts; give --url"),
])
def test_a_file_without_an_endpoint_to_ask_names_the_key(tmp_path: Path, metrics: dict | None, said: str) -> None:
    path = config_file(tmp_path, metrics)
    with pytest.raises(ConfigError) as refused:
        endpoint_url(flags(config=path), "/metrics")
    assert str(refused.value).startswith(f"config error in {path}: {said}")


def test_a_file_kqp_run_would_refuse_is_refused_alike(tmp_path: Path) -> None:
    path = tmp_path / "kqp.yaml"
    path.write_text("metrics: {listn: 9404}\n")
    with pytest.raises(ConfigError) as refused:
        endpoint_url(flags(config=path), "/metrics")
    assert str(refused.value) == f"config error in {path}: metrics.listn: unknown key; did you mean 'listen'?"
