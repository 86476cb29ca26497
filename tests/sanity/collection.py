"""The modules as a collection tree, the layout ``ansible-test sanity`` needs.

The repository keeps Ansible's playbook-adjacent layout (library/, module_utils/,
action_plugins/, filter_plugins/, callback_plugins/, doc_fragments/), which a collection
reviewer's tools do not read; this builds ``ansible_collections/<namespace>/<name>/`` from
the same files, the one change being the names of our own module_utils and doc fragments, as
a collection spells them (its package, its fully qualified fragment names).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMESPACE, NAME = "coordinator_cluster", "cluster"
PACKAGE = f"ansible_collections.{NAMESPACE}.{NAME}.plugins.module_utils"
# Where each plugin type lives here -> where a collection keeps it.
LAYOUT = {
    "library": "plugins/modules",
    "module_utils": "plugins/module_utils",
    "action_plugins": "plugins/action",
    "filter_plugins": "plugins/filter",
    "callback_plugins": "plugins/callback",
    "doc_fragments": "plugins/doc_fragments",
}


def own_module_utils() -> set[str]:
    return {path.stem for path in (REPO / "module_utils").glob("*.py")}


def collection_source(text: str, names: set[str]) -> str:
    """``ansible.module_utils.<ours>`` imports rewritten to the collection's package."""
    pattern = re.compile(r"\bansible\.module_utils\.(" + "|".join(sorted(names)) + r")\b")
    return pattern.sub(lambda match: f"{PACKAGE}.{match.group(1)}", text)


def own_doc_fragments() -> set[str]:
    return {path.stem for path in (REPO / "doc_fragments").glob("*.py")}


def collection_fragments(text: str, names: set[str]) -> str:
    """Our doc fragments named in ``extends_documentation_fragment`` lists, fully qualified
    (a collection's module finds its collection's fragments by that name only)."""
    item = re.compile(r"^(\s+- )(" + "|".join(sorted(names)) + r")$", re.M)
    block = re.compile(r"^extends_documentation_fragment:\n(?:\s+- .*\n)+", re.M)
    return block.sub(lambda found: item.sub(rf"\g<1>{NAMESPACE}.{NAME}.\g<2>", found.group(0)),
                     text)


def build(root: Path, version: str = "1.0.0") -> Path:
    """Write the collection under ``root``; return its directory."""
    collection = root / "ansible_collections" / NAMESPACE / NAME
    names, fragments = own_module_utils(), own_doc_fragments()
    for source, target in LAYOUT.items():
        (collection / target).mkdir(parents=True, exist_ok=True)
        for path in sorted((REPO / source).glob("*.py")):
            text = path.read_text()  # a link (coordinator_contract.py) is copied as its file
            text = collection_fragments(collection_source(text, names), fragments)
            (collection / target / path.name).write_text(text)
    (collection / "galaxy.yml").write_text(
        f"namespace: {NAMESPACE}\nname: {NAME}\nversion: {version}\nreadme: README.md\n"
        "authors: [coordinator-cluster contributors]\nlicense: [GPL-3.0-or-later]\n")
    shutil.copy(REPO / "README.md", collection / "README.md")
    (collection / "meta").mkdir(exist_ok=True)
    (collection / "meta" / "runtime.yml").write_text("requires_ansible: '>=2.19.0'\n")
    return collection
