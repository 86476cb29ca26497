"""HTTP stand-ins for SearXNG, Ollama and ntfy, for tests, the demo and the lab (see
README.md here).

Standard library only. Each server imports standin_core.py (what they share) and the
Ollama one coordinator_contract.py (files/: the cluster's one rule for matching model names);
on a lab host the files lie side by side (``python3 /opt/standins/ollama.py --port 11434``,
lab/prepare.yml copies them). From the repository, this package puts files/ on the path.
"""

import sys
from pathlib import Path

_FILES = str(Path(__file__).resolve().parents[2] / "files")
if _FILES not in sys.path:
    sys.path.append(_FILES)
