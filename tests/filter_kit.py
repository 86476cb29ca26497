"""The filter plugins as the tests import them: each file loaded by path, as Ansible loads a
playbook's or a role's filter_plugins/ (they are no package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem + "_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = load(REPO / "roles" / "worker" / "filter_plugins" / "worker.py")
cluster = load(REPO / "filter_plugins" / "cluster.py")
redis_role = load(REPO / "roles" / "redis" / "filter_plugins" / "redis_acl.py")
