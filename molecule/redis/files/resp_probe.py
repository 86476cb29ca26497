#!/usr/bin/env python3
"""Talk RESP to a Redis server the way a worker does, and print its replies as JSON.

Usage: resp_probe.py HOST PORT; the password comes from $PROBE_PASSWORD (never argv), and
an optional previous password from $PROBE_OLD_PASSWORD.
Prints {"ping_without_auth", "auth_wrong", ["auth_old",] "auth", "ping"}: first reply lines.
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
    return reply.decode(errors="replace").split("\r\n", 1)[0]


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    password = os.environ["PROBE_PASSWORD"]
    with socket.create_connection((host, port), timeout=5) as sock:
        result = {
            "ping_without_auth": command(sock, "PING"),
            "auth_wrong": command(sock, "AUTH", "not-the-password"),
        }
        if os.environ.get("PROBE_OLD_PASSWORD"):
            result["auth_old"] = command(sock, "AUTH", os.environ["PROBE_OLD_PASSWORD"])
        result["auth"] = command(sock, "AUTH", password)
        result["ping"] = command(sock, "PING")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
