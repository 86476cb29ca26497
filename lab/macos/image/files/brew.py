#!/usr/bin/python3.11
"""/opt/homebrew/bin/brew on the Mac-shaped lab node: Homebrew's commands and output where
the product and community.general.homebrew call them, installing offline "bottles" the image
carries (/opt/lab-macos/bottles/NAME/VERSION/) into the prefix as Homebrew does:

    brew --version | --prefix [FORMULA] | --cellar | shellenv
    brew info --json=v2 [--formula] FORMULA...       (community.general.homebrew's look-up)
    brew install [--formula] FORMULA...  |  uninstall [--force] FORMULA...
    brew list [--versions] [FORMULA...]  |  update  |  upgrade [FORMULA...]

Each behaviour is Homebrew's own (https://github.com/Homebrew/brew, Library/Homebrew/):
- as root it refuses everything but --prefix, with brew.sh's check-run-command-as-root text;
- an unknown formula: exceptions.rb FormulaUnavailableError / FormulaOrCaskUnavailableError
  ("No available formula with the name ..."), and install's search (cmd/install.rb):
  a Warning, "==> Searching for similarly named formulae and casks...", then
  "Error: No formulae or casks found for NAME.", exit 1;
- install pours the keg to Cellar/NAME/VERSION, links NAME's executables into bin/ and
  opt/NAME -> ../Cellar/NAME/VERSION (https://docs.brew.sh/Formula-Cookbook#homebrew-terminology);
  python@3.12 links only its versioned programs (python3.12, pip3.12, ...), as the formula
  does; an installed one: install/check.rb's "is already installed and up-to-date" warning;
- info --json=v2: {"formulae": [...], "casks": []} with the keys the module reads (name,
  full_name, tap, aliases, oldnames, installed, outdated, linked_keg, versions);
- update: "Already up-to-date." (cmd/update.sh; the lab's Homebrew has nothing newer);
- an unknown command: "Error: Unknown command: brew CMD" (brew.rb), exit 1.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

PREFIX = Path("/opt/homebrew")
CELLAR = PREFIX / "Cellar"
BOTTLES = Path("/opt/lab-macos/bottles")
# A Homebrew release of the macOS 15 era; nothing in the product reads it.
VERSION = "4.6.7"
ROOT_REFUSAL = """\
Running Homebrew as root is extremely dangerous and no longer supported.
As Homebrew does not drop privileges on installation you would be giving all
build scripts full access to your system."""
# What each lab bottle is (formulae.brew.sh's desc and homepage, their aliases).
FORMULAE = {
    "python@3.12": {"desc": "Interpreted, interactive, object-oriented programming language",
                    "homepage": "https://www.python.org/", "aliases": ["python3.12"],
                    # The formula links only the versioned programs into the prefix.
                    "links": lambda name: "3.12" in name and not name.endswith(".py")},
    "ollama": {"desc": "Create, run, and share large language models (LLMs)",
               "homepage": "https://ollama.com/", "aliases": [],
               "links": lambda name: True},
}


class BrewError(Exception):
    """Ends brew with "Error: <message>" and status 1, as Homebrew's odie/ofail do."""


def available(name: str) -> str | None:
    """The version of the bottle the lab carries for ``name`` (tap prefix allowed)."""
    name = name.removeprefix("homebrew/core/")
    versions = sorted(path.name for path in (BOTTLES / name).glob("*")) \
        if name in FORMULAE else []
    return versions[-1] if versions else None


def installed(name: str) -> str | None:
    kegs = sorted(path.name for path in (CELLAR / name).glob("*")) if name in FORMULAE else []
    return kegs[-1] if kegs else None


def unavailable(name: str, formula_only: bool) -> BrewError:
    what = "formula" if formula_only else "formula or cask"
    return BrewError(f'No available {what} with the name "{name}".')


def formula_json(name: str) -> dict:
    version = available(name)
    keg = installed(name)
    receipt = {}
    if keg is not None:
        receipt_path = CELLAR / name / keg / "INSTALL_RECEIPT.json"
        receipt = json.loads(receipt_path.read_text()) if receipt_path.exists() else {}
    return {
        "name": name, "full_name": name, "tap": "homebrew/core", "oldnames": [],
        "aliases": FORMULAE[name]["aliases"], "versioned_formulae": [],
        "desc": FORMULAE[name]["desc"], "homepage": FORMULAE[name]["homepage"],
        "versions": {"stable": version, "head": None, "bottle": True},
        "revision": 0, "keg_only": False, "pinned": False, "outdated": False,
        "deprecated": False, "disabled": False, "dependencies": [],
        "linked_keg": keg,
        "installed": [] if keg is None else [{
            "version": keg, "used_options": [], "built_as_bottle": True,
            "poured_from_bottle": True, "time": receipt.get("time"),
            "runtime_dependencies": [], "installed_as_dependency": False,
            "installed_on_request": True}],
    }


def keg_summary(keg: Path) -> str:
    files = [path for path in keg.rglob("*") if path.is_file() and not path.is_symlink()]
    size = sum(path.stat().st_size for path in files)
    return f"{len(files)} files, {size / 1024 / 1024:.1f}MB"


def install(names: list[str], formula_only: bool) -> int:
    for name in names:
        version = available(name)
        if version is None:
            print(f"Warning: {unavailable(name, formula_only)}", file=sys.stderr)
            print("==> Searching for similarly named formulae and casks...")
            raise BrewError(f"No formulae or casks found for {name}.")
        name = name.removeprefix("homebrew/core/")
        if installed(name) is not None:
            print(f"Warning: {name} {version} is already installed and up-to-date.\n"
                  f"To reinstall {version}, run:\n  brew reinstall {name}", file=sys.stderr)
            continue
        keg = CELLAR / name / version
        print(f"==> Fetching {name}\n==> Pouring {name}--{version}.arm64_sequoia.bottle.tar.gz")
        keg.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(BOTTLES / name / version, keg, symlinks=True)
        (keg / "INSTALL_RECEIPT.json").write_text(json.dumps(
            {"homebrew_version": VERSION, "installed_on_request": True,
             "poured_from_bottle": True, "time": int(time.time())}))
        opt = PREFIX / "opt" / name
        opt.parent.mkdir(exist_ok=True)
        opt.symlink_to(Path("..") / "Cellar" / name / version)
        (PREFIX / "bin").mkdir(exist_ok=True)
        for program in sorted((keg / "bin").iterdir()):
            if FORMULAE[name]["links"](program.name):
                link = PREFIX / "bin" / program.name
                link.unlink(missing_ok=True)
                link.symlink_to(Path("..") / "Cellar" / name / version / "bin" / program.name)
        print(f"\N{BEER MUG}  {keg}: {keg_summary(keg)}")
    return 0


def uninstall(names: list[str]) -> int:
    for name in names:
        if available(name) is None:
            raise unavailable(name, False)
        keg_version = installed(name)
        if keg_version is None:
            raise BrewError(f"No such keg: {CELLAR / name}")
        keg = CELLAR / name / keg_version
        summary = keg_summary(keg)
        for link in (PREFIX / "bin").glob("*"):
            if link.is_symlink() and str(os.readlink(link)).startswith(f"../Cellar/{name}/"):
                link.unlink()
        (PREFIX / "opt" / name).unlink(missing_ok=True)
        shutil.rmtree(CELLAR / name)
        print(f"Uninstalling {keg}... ({summary})")
    return 0


def info(args: list[str]) -> int:
    formula_only = "--formula" in args or "--formulae" in args
    names = [arg for arg in args if not arg.startswith("--")]
    if not any(arg.startswith("--json") for arg in args):
        for name in names:
            if available(name) is None:
                raise unavailable(name, formula_only)
            keg = installed(name)
            print(f"==> {name}: stable {available(name)} (bottled)\n{FORMULAE[name]['desc']}\n"
                  f"{FORMULAE[name]['homepage']}\n"
                  + (f"Installed\n{CELLAR / name / keg}" if keg else "Not installed"))
        return 0
    if "--json=v2" not in args:
        raise BrewError("Invalid usage: the lab's brew answers --json=v2 only")
    for name in names:
        if available(name) is None:
            raise unavailable(name, formula_only)
    print(json.dumps({"formulae": [formula_json(name.removeprefix("homebrew/core/"))
                                   for name in names], "casks": []}, indent=2))
    return 0


def listing(args: list[str]) -> int:
    names = [arg for arg in args if not arg.startswith("-")] \
        or [name for name in FORMULAE if installed(name)]
    for name in names:
        keg = installed(name)
        if keg is None:
            raise BrewError(f"No such keg: {CELLAR / name}")
        print(f"{name} {keg}" if "--versions" in args else name)
    return 0


def shellenv() -> int:
    """cmd/shellenv.sh for sh/bash/zsh where /usr/libexec/path_helper is absent."""
    print(f'export HOMEBREW_PREFIX="{PREFIX}";\nexport HOMEBREW_CELLAR="{CELLAR}";\n'
          f'export HOMEBREW_REPOSITORY="{PREFIX}";\n'
          f'export PATH="{PREFIX}/bin:{PREFIX}/sbin${{PATH+:$PATH}}";\n'
          '[ -z "${MANPATH-}" ] || export MANPATH=":${MANPATH#:}";\n'
          f'export INFOPATH="{PREFIX}/share/info:${{INFOPATH:-}}";')
    return 0


def run(args: list[str]) -> int:
    command, rest = (args[0], args[1:]) if args else ("help", [])
    if os.geteuid() == 0 and command != "--prefix":
        raise BrewError(ROOT_REFUSAL)
    if command == "--version":
        print(f"Homebrew {VERSION}")
        return 0
    if command == "--prefix":
        for name in rest:
            if available(name) is None:
                raise unavailable(name, True)
        print("\n".join(str(PREFIX / "opt" / name) for name in rest) if rest else PREFIX)
        return 0
    if command == "--cellar":
        print(CELLAR)
        return 0
    if command == "shellenv":
        return shellenv()
    if command == "info":
        return info(rest)
    if command == "install":
        return install([arg for arg in rest if not arg.startswith("-")], "--formula" in rest)
    if command in ("uninstall", "remove", "rm"):
        return uninstall([arg for arg in rest if not arg.startswith("-")])
    if command in ("list", "ls"):
        return listing(rest)
    if command == "update":
        print("Already up-to-date.")
        return 0
    if command == "upgrade":
        return 0
    raise BrewError(f"Unknown command: brew {command}")


def main() -> int:
    try:
        return run(sys.argv[1:])
    except BrewError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
