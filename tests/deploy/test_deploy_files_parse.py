"""Every YAML and JSON file in deploy/ parses, and every kqp config in deploy/ loads in kqp."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from deploy_files import DEPLOY, by_kind, documents, json_files, relative, yaml_files

from kqp.config.loader import load_config, parse_config


def test_deploy_has_files_to_check() -> None:
    # Guards the parametrized tests below against silently checking nothing.
    names = {relative(p) for p in yaml_files()}
    assert {"deploy/docker-compose.yml", "deploy/k8s/sidecar/executor-pod-template.yaml",
            "deploy/k8s/shared/deployment.yaml"} <= names


@pytest.mark.parametrize("path", yaml_files() + json_files(), ids=relative)
def test_file_parses(path: Path) -> None:
    if path.suffix == ".json":
        assert isinstance(json.loads(path.read_text(encoding="utf-8")), dict | list)
    else:
        assert documents(path), f"{relative(path)} holds no YAML document"


def test_compose_kqp_config_loads() -> None:
    config = load_config(DEPLOY / "compose" / "kqp" / "kqp.yaml")
    assert config.listen.port == 19092
    assert config.metrics.listen is not None and config.metrics.listen.port == 9404


@pytest.mark.parametrize("variant", ["sidecar", "shared"])
def test_configmap_kqp_configs_load(variant: str) -> None:
    [configmap] = by_kind("ConfigMap", DEPLOY / "k8s" / variant)
    config = parse_config(yaml.safe_load(configmap["data"]["kqp.yaml"]), source=f"{variant} ConfigMap")
    assert config.quotas.entities, "a quota ConfigMap without quotas"
    assert config.metrics.listen is not None and config.metrics.listen.host == "0.0.0.0"
