#!/usr/bin/env python3
"""Talk RESP to a Redis server from a worker host, and print its replies as JSON.

Usage: resp_probe.py HOST PORT; the commands come from $PROBE_COMMANDS (never argv, they
carry passwords): a JSON object of label -> [command, arg, ...], sent in order on one
connection. Prints {label: the reply's first line} (e.g. "+OK", ":0", "-NOPERM ...").
"""

from __future__ import annotations

import json
import os
import socket
import sys


def command(sock: socket.socket, *args: str) -> str:
    payload = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
    sock.sendall(payload.encode())
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    first = reply.decode(errors="replace").split("\r\n", 1)[0]
    # An array (KEYS, LRANGE) or a bulk string: read no further; the first line says enough
    # for short replies, and the tests use only empty or refused ones.
    return first


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    commands = json.loads(os.environ["PROBE_COMMANDS"])
    with socket.create_connection((host, port), timeout=5) as sock:
        result = {label: command(sock, *map(str, args)) for label, args in commands.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
