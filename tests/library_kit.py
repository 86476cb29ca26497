"""What the tests of the modules of library/ share: their documentation as ansible-doc reads
it, and the module imported as code (tests/conftest.py makes module_utils importable where
Ansible puts them)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"


def module_doc(name: str) -> dict:
    """A module's DOCUMENTATION, EXAMPLES and RETURN as ``ansible-doc --json`` parses them."""
    out = subprocess.run(
        [str(ANSIBLE_DOC), "-M", str(REPO / "library"), "--json", name],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)[name]


def load_module(name: str) -> ModuleType:
    """library/<name>.py imported (tests/conftest.py makes module_utils importable where
    Ansible puts them)."""
    spec = importlib.util.spec_from_file_location(f"{name}_module",
                                                  REPO / "library" / f"{name}.py")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up there
    spec.loader.exec_module(loaded)
    return loaded
