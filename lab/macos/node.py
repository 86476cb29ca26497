"""The Mac-shaped lab node: its facts, and the switches a test flips on a running one.

    python -m lab.macos.node NAME login|logout          the console session (gui/<uid>)
    python -m lab.macos.node NAME localnet-deny|localnet-allow
                                                       macOS 15's Local Network privacy
    python -m lab.macos.node NAME localnet-grant PATH  allow one binary (its resolved path)
    python -m lab.macos.node NAME ollama-app-start|ollama-app-stop
                                                       Ollama.app serving on 127.0.0.1:11434
    python -m lab.macos.node build-env                 the image's build arguments (build.sh)
    python -m lab.macos.node image                     the image's tag

Every switch runs `podman exec` as root in container NAME: what a person does at the Mac
(logging in at the console, a click in System Settings, opening an app), which the product
itself never can. The image is built by lab/macos/image/build.sh; docs/lab.md, "The
Mac-shaped node", lists what it copies from macOS and from where.
"""

from __future__ import annotations

import argparse
import shlex
import sys

import yaml

from lab import lab
from lab.macos import launchd_protocol

IMAGE = "localhost/coordinator-lab-mac:bookworm"
# The node is reached as the home inventory's MacBook Air is: its login user is read from
# there, so the lab cannot drift from the machine it stands for.
HOME_MAC = lab.REPO / "inventory" / "home" / "host_vars" / "macbookair" / "main.yml"
USER: str = yaml.safe_load(HOME_MAC.read_text())["ansible_user"]
# The first account made in Setup Assistant gets uid 501 and primary group staff (gid 20):
# https://support.apple.com/guide/directory-utility/ (Advanced Options: "User ID ... 501")
# and `dscl . -read /Groups/staff PrimaryGroupID` = 20 on every macOS.
UID = 501
GROUP = "staff"
GID = 20
HOME = f"/Users/{USER}"
# launchd's contract with the image (lab/macos/launchd.py): the socket launchctl finds, its
# state directory (where macOS keeps disabled.<uid>.plist:
# /private/var/db/com.apple.xpc.launchd) and the systemd unit that is "the user logged in at
# the console".
LAUNCHD_SOCKET = launchd_protocol.socket_path(UID)
LAUNCHD_STATE_DIR = "/var/db/com.apple.xpc.launchd"
SESSION_UNIT = "lab-gui-session.service"
LOCALNET_DENIED = f"{LAUNCHD_STATE_DIR}/localnet-denied"
LOCALNET_GRANTED = f"{LAUNCHD_STATE_DIR}/localnet-granted"
# The Command Line Tools (xcode-select --install) and their Python 3 framework, whose
# python3 /usr/bin/python3 runs on a Mac without Xcode.
CLT = "/Library/Developer/CommandLineTools"
CLT_PYTHON = f"{CLT}/Library/Frameworks/Python3.framework/Versions/3.9"
# Ollama.app's own server binary, started by the app outside the user's LaunchAgents, on
# Ollama's default address (https://github.com/ollama/ollama/blob/main/docs/faq.md:
# "Ollama binds 127.0.0.1 port 11434 by default").
OLLAMA_APP = "/Applications/Ollama.app"
OLLAMA_APP_BINARY = f"{OLLAMA_APP}/Contents/Resources/ollama"
OLLAMA_APP_HOST = "127.0.0.1:11434"
# Where the image keeps the app until ollama-app-start "installs" it (a stock Mac has none).
OLLAMA_APP_SOURCE = "/opt/lab-macos/apps/Ollama.app"
OLLAMA_APP_PIDFILE = "/tmp/lab-ollama-app.pid"
OLLAMA_APP_LOG = "/tmp/lab-ollama-app.log"


def build_env() -> dict[str, str]:
    """The facts lab/macos/image/build.sh bakes into the image (and hashes)."""
    return {"MAC_USER": USER, "MAC_HOME": HOME, "MAC_UID": str(UID), "MAC_GROUP": GROUP,
            "MAC_GID": str(GID),
            "LAUNCHD_STATE_DIR": LAUNCHD_STATE_DIR, "LAUNCHD_SOCKET": LAUNCHD_SOCKET,
            "SESSION_UNIT": SESSION_UNIT, "OLLAMA_APP_SOURCE": OLLAMA_APP_SOURCE,
            "CLT": CLT, "CLT_PYTHON": CLT_PYTHON, "MAC_STD_PATH": launchd_protocol.STD_PATH,
            # Where lab/lab.py mounts the real-inference kit, for the ollama launcher.
            "INFERENCE_MOUNT": lab.load_lab().inference_mount or ""}


def root_shell(name: str, script: str) -> str:
    """Run ``script`` with sh as root in the container; its stdout. Fails with its stderr."""
    result = lab.podman("exec", name, "sh", "-c", script, check=False, capture=True)
    if result.returncode != 0:
        raise SystemExit(f"{name}: {script!r} failed ({result.returncode}): "
                         f"{result.stderr.strip()[-400:]}")
    return result.stdout


def login(name: str) -> None:
    """The user logs in at the console: launchd's gui/<uid> domain comes up and bootstraps
    the agents of ~/Library/LaunchAgents that are not disabled."""
    root_shell(name, f"systemctl start {SESSION_UNIT}")


def logout(name: str) -> None:
    """The user logs out (or the Mac rebooted and nobody logged in): the domain's jobs stop
    and gui/<uid> is gone until the next login."""
    root_shell(name, f"systemctl stop {SESSION_UNIT}")


def localnet_deny(name: str) -> None:
    """Local Network privacy denies the launchd jobs started from now on (binaries without a
    grant): LAN connects fail with EHOSTUNREACH, loopback works, SSH sessions are not
    affected (https://developer.apple.com/documentation/technotes/tn3179-understanding-local-network-privacy)."""
    root_shell(name, f"touch {LOCALNET_DENIED}")


def localnet_allow(name: str) -> None:
    root_shell(name, f"rm -f {LOCALNET_DENIED}")


def localnet_grant(name: str, path: str) -> None:
    """The user allows one program in System Settings > Privacy & Security > Local Network;
    macOS ties the grant to the executable, so its resolved path is what is listed."""
    root_shell(name, f"realpath -e {shlex.quote(path)} >> {LOCALNET_GRANTED}")


def ollama_app_start(name: str) -> None:
    """Ollama.app is installed and opened: its own `ollama serve`, as the user and outside
    launchd's gui domain, on 127.0.0.1:11434."""
    root_shell(name, f"test -e {OLLAMA_APP} || cp -a {OLLAMA_APP_SOURCE} /Applications/")
    lab.podman("exec", "--detach", "--user", USER, "--env", f"HOME={HOME}",
               "--env", f"OLLAMA_HOST={OLLAMA_APP_HOST}", "--workdir", HOME, name, "sh", "-c",
               f"echo $$ > {OLLAMA_APP_PIDFILE}; exec {OLLAMA_APP_BINARY} serve"
               f" >>{OLLAMA_APP_LOG} 2>&1", capture=True)


def ollama_app_stop(name: str) -> None:
    """The app is quit: its server gets SIGTERM."""
    root_shell(name, f"test ! -s {OLLAMA_APP_PIDFILE} || kill $(cat {OLLAMA_APP_PIDFILE}) "
               f"2>/dev/null; rm -f {OLLAMA_APP_PIDFILE}")


SWITCHES = {"login": login, "logout": logout, "localnet-deny": localnet_deny,
            "localnet-allow": localnet_allow, "ollama-app-start": ollama_app_start,
            "ollama-app-stop": ollama_app_stop}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["build-env"]:
        print("\n".join(f"{key}={shlex.quote(value)}" for key, value in build_env().items()))
        return 0
    if args == ["image"]:
        print(IMAGE)
        return 0
    parser = argparse.ArgumentParser(prog="python -m lab.macos.node",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("name", help="the node's container")
    parser.add_argument("switch", choices=[*SWITCHES, "localnet-grant"])
    parser.add_argument("path", nargs="?", help="localnet-grant: the program to allow")
    parsed = parser.parse_args(args)
    if parsed.switch == "localnet-grant":
        if not parsed.path:
            parser.error("localnet-grant needs the program's PATH")
        localnet_grant(parsed.name, parsed.path)
    else:
        SWITCHES[parsed.switch](parsed.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

