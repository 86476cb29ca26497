"""HTTP stand-ins for SearXNG and Ollama, for tests and the demo (see README.md here).

Each module is self-contained (standard library only) so it also runs as a single file
copied onto a lab host: ``python3 /opt/standins/ollama.py --port 11434``.
"""
