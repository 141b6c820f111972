"""Where the deployment files are, and how the deploy tests read them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
# Helm values and kqp config fragments, not Kubernetes manifests: each such folder has its own test.
NOT_MANIFESTS = (K8S / "fleet" / "redis-cluster",)
COMPOSE = DEPLOY / "docker-compose.yml"
DOCKERFILES = [ROOT / "Dockerfile", DEPLOY / "spark" / "Dockerfile"]
# Pinned so a new kubernetes-validate release cannot change what passes; 1.33 is the first
# release with native sidecar containers (initContainers with restartPolicy: Always) GA.
KUBERNETES_VERSION = "1.33.0"


def yaml_files(under: Path = DEPLOY) -> list[Path]:
    return sorted(p for p in under.rglob("*") if p.suffix in (".yaml", ".yml"))


def json_files(under: Path = DEPLOY) -> list[Path]:
    return sorted(under.rglob("*.json"))


def documents(path: Path) -> list[Any]:
    """Every YAML document in a file (Kubernetes files may hold several), empty ones dropped."""
    with path.open(encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def manifests(under: Path = K8S) -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in yaml_files(under) if not any(path.is_relative_to(d) for d in NOT_MANIFESTS)
            for doc in documents(path)]


def by_kind(kind: str, under: Path) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests(under) if doc.get("kind") == kind]


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))
