#!/usr/bin/python3.11
"""`ollama` on the Mac-shaped lab node: the brew bottle's bin/ollama and Ollama.app's
Contents/Resources/ollama. It runs the lab's Ollama stand-in (lab/standins/ollama.py, in
../libexec beside it) in this process, so pgrep and lsof name it `ollama` as the real one.

    ollama serve        listen on OLLAMA_HOST (default 127.0.0.1:11434), as `ollama serve`
    ollama -v|--version "ollama version is X" (the version /api/version reports)

OLLAMA_HOST is read as Ollama reads it (envconfig.Host() in
https://github.com/ollama/ollama/blob/main/envconfig/config.go): optional scheme, host
default 127.0.0.1, port default 11434. The models live under OLLAMA_MODELS (default
~/.ollama/models, Ollama's), where the stand-in keeps the models it "has". A made-up model's
generation takes the seconds in /opt/lab-macos/ollama-latency when that file exists, else
0.3; the models of the real-inference kit's registry (lab/inference.py, mounted where
/opt/lab-macos/inference-mount says) run for real, with llama.cpp from the kit.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

LIBEXEC = Path(__file__).resolve().parent.parent / "libexec"
LATENCY_FILE = Path("/opt/lab-macos/ollama-latency")
INFERENCE_MOUNT_FILE = Path("/opt/lab-macos/inference-mount")
DEFAULT_LATENCY = 0.3
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 11434


def listen_address(value: str) -> tuple[str, int]:
    """OLLAMA_HOST as envconfig.Host() reads it: [scheme://]host[:port]."""
    value = value.strip().strip("\"'")
    if not value:
        return DEFAULT_HOST, DEFAULT_PORT
    split = urlsplit(value if "://" in value else f"http://{value}")
    return split.hostname or DEFAULT_HOST, split.port or DEFAULT_PORT


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(LIBEXEC))
    import ollama as standin  # the stand-in's module in libexec/, not this launcher

    if argv and argv[0] in ("-v", "--version"):
        version = next(setting.default for setting in standin.SCHEMA
                       if setting.name == "ollama_version")
        print(f"ollama version is {version}")
        return 0
    if argv != ["serve"]:
        print(f"Error: the lab's ollama runs `serve` and `--version` only, not {argv}",
              file=sys.stderr)
        return 1
    host, port = listen_address(os.environ.get("OLLAMA_HOST", ""))
    models = Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")
    models.mkdir(parents=True, exist_ok=True)
    latency = (LATENCY_FILE.read_text().strip() if LATENCY_FILE.exists()
               else str(DEFAULT_LATENCY))
    registry: list[str] = []
    kit = Path(INFERENCE_MOUNT_FILE.read_text().strip()) if INFERENCE_MOUNT_FILE.exists() else None
    if kit and (kit / "models" / "index.json").exists():
        sys.path.insert(0, str(kit / "site"))
        registry = ["--registry", str(kit / "models" / "index.json")]
    standin.main(["--bind", host, "--port", str(port), "--latency", latency,
                  "--state-file", str(models / "standin-state.json"), *registry])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
