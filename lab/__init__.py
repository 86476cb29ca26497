"""The container lab, its stand-ins and the throwaway servers the tests and benchmarks use.

The lab drives the project's own programs, so their shared contract (files/, e.g.
``coordinator_contract``) is importable from every module of the package."""

import sys
from pathlib import Path

_FILES = str(Path(__file__).resolve().parent.parent / "files")
if _FILES not in sys.path:
    sys.path.append(_FILES)
