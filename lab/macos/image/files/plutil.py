#!/usr/bin/python3.11
"""/usr/bin/plutil of macOS, for what the product asks of it:

    plutil -extract KEYPATH raw [-n] [-o -] FILE    one value, printed as plutil(1) prints raw
    plutil -lint FILE...                            "FILE: OK" for each readable plist

Behaviours copied from plutil(1) (its -help text, quoted in
https://github.com/assafkip/kipi-system/pull/326): a key path is keys joined by dots, a number
indexes an array; raw prints a string as it is, a bool as true/false, a number as its value,
a date as RFC 3339 in UTC, data as base64, a dictionary's keys one a line, an array's count;
a missing key: "FILE: Could not extract value, error: No value at that key path or invalid
key path: KEYPATH" on stderr, exit 1 (as reported in
https://github.com/flutter/flutter/issues/172627). Other commands are not implemented here and
say so (exit 1): the product must not rely on them.
"""

from __future__ import annotations

import base64
import datetime
import plistlib
import sys
from typing import Any

MISSING = "Could not extract value, error: No value at that key path or invalid key path: "


def lookup(value: Any, keypath: str) -> Any:
    for key in keypath.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise KeyError(keypath)
    return value


def raw(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")  # plistlib gives UTC, naive
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return "\n".join(value)
    if isinstance(value, list):
        return str(len(value))
    return str(value)


def main(argv: list[str]) -> int:
    if argv[:1] == ["-lint"] and argv[1:]:
        status = 0
        for path in argv[1:]:
            try:
                with open(path, "rb") as handle:
                    plistlib.load(handle)
                print(f"{path}: OK")
            except (OSError, plistlib.InvalidFileException, ValueError) as error:
                print(f"{path}: {error}", file=sys.stderr)
                status = 1
        return status
    if len(argv) >= 4 and argv[0] == "-extract" and argv[2] == "raw":
        keypath, path, options = argv[1], argv[-1], argv[3:-1]
        if options not in ([], ["-n"], ["-o", "-"], ["-o", "-", "-n"], ["-n", "-o", "-"]):
            print(f"plutil: the lab's plutil stand-in does not take {options}", file=sys.stderr)
            return 1
        with open(path, "rb") as handle:
            document = plistlib.load(handle)
        try:
            value = lookup(document, keypath)
        except KeyError:
            print(f"{path}: {MISSING}{keypath}", file=sys.stderr)
            return 1
        sys.stdout.write(raw(value) + ("" if "-n" in options else "\n"))
        return 0
    print(f"plutil: the lab's plutil stand-in implements -extract KEYPATH raw and -lint only, "
          f"not {argv}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
