#!/usr/bin/python3.11
"""sw_vers(1) of macOS: the product name, version and build, read from SystemVersion.plist.

    sw_vers                 ProductName, ProductVersion and BuildVersion, one a line
    sw_vers -productName | -productVersion | -buildVersion | -productVersionExtra

Output layout and options as in https://ss64.com/mac/sw_vers.html (macOS 13+: two tabs after
the shorter names; -productVersionExtra prints the Rapid Security Response suffix, empty
here). Ansible's distribution facts run `/usr/bin/sw_vers -productVersion`.
"""

from __future__ import annotations

import plistlib
import sys

PLIST = "/System/Library/CoreServices/SystemVersion.plist"
USAGE = ("Usage: sw_vers [--productName|--productVersion|--productVersionExtra|"
         "--buildVersion]")
FIELDS = {"productName": "ProductName", "productVersion": "ProductVersion",
          "productVersionExtra": "ProductVersionExtra", "buildVersion": "ProductBuildVersion"}


def main(argv: list[str]) -> int:
    with open(PLIST, "rb") as handle:
        info = plistlib.load(handle)
    if not argv:
        print(f"ProductName:\t\t{info['ProductName']}")
        print(f"ProductVersion:\t\t{info['ProductVersion']}")
        print(f"BuildVersion:\t\t{info['ProductBuildVersion']}")
        return 0
    # sw_vers takes its options with one dash or two.
    option = argv[0].lstrip("-")
    if len(argv) != 1 or option not in FIELDS:
        print(USAGE, file=sys.stderr)
        return 1
    print(info.get(FIELDS[option], ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
