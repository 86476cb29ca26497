"""Test double for macOS launchctl: just enough of it to run the role's launchd tasks.

Usage: launchctl.py STATE_DIR <launchctl arguments>. Every call is appended to
STATE_DIR/calls; which agents are loaded (label -> plist path) and which labels are disabled
live in STATE_DIR/launchd.json. Answers and exit codes follow launchctl's: 113 for a service
launchd does not know, 5 for a bootstrap that cannot be done (already loaded, or disabled).
It checks the role's command sequence, not launchd's behaviour.
"""

from __future__ import annotations

import json
import plistlib
import sys
from pathlib import Path


def main(state_dir: Path, args: list[str]) -> int:
    with (state_dir / "calls").open("a") as calls:
        calls.write(" ".join(args) + "\n")
    state_file = state_dir / "launchd.json"
    state = (
        json.loads(state_file.read_text())
        if state_file.exists()
        else {"loaded": {}, "disabled": []}
    )
    command, target = [*args, "", ""][:2]
    label = target.split("/", 2)[2] if target.count("/") == 2 else ""
    rc = 0
    if command == "print" and not label:
        print(f"{target} = {{\n\ttype = gui\n}}")
    elif command == "print":
        if label not in state["loaded"]:
            print(f'Could not find service "{label}" in domain for user gui', file=sys.stderr)
            rc = 113
        else:
            print(f"{target} = {{\n\tpath = {state['loaded'][label]}\n\tstate = running\n}}")
    elif command == "print-disabled":
        entries = "".join(f'\t"{name}" => disabled\n' for name in state["disabled"])
        print(f"disabled services = {{\n{entries}}}")
    elif command == "bootstrap":
        path = args[2]
        new_label = plistlib.loads(Path(path).read_bytes())["Label"]
        if new_label in state["loaded"] or new_label in state["disabled"]:
            print("Bootstrap failed: 5: Input/output error", file=sys.stderr)
            rc = 5
        else:
            state["loaded"][new_label] = path
    elif command == "bootout":
        if state["loaded"].pop(label, None) is None:
            print("Boot-out failed: 3: No such process", file=sys.stderr)
            rc = 3
    elif command == "enable":
        state["disabled"] = [name for name in state["disabled"] if name != label]
    elif command == "disable":
        state["disabled"] = sorted({*state["disabled"], label})
    else:
        print(f"launchctl test double: {command} is not used by the role", file=sys.stderr)
        rc = 64
    state_file.write_text(json.dumps(state))
    return rc


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
