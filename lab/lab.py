"""Create and destroy the container lab: a podman network and one systemd container per host.

    python -m lab.lab create [--outsider]   build the image (cached), network, containers
    python -m lab.lab destroy               remove the containers and the network
    python -m lab.lab status                show the lab's containers
    python -m lab.lab --inventory DIR ...   another lab inventory (default inventory/lab)

The hosts and their fixed addresses come from the lab inventory (inventory/lab/hosts.yml,
`node_address` of every host in the group `lab_nodes`), the network, subnet and image from
inventory/lab/group_vars/all/lab.yml, so the inventory is the one place that names them.
`--outsider` adds the outsider (`lab-outsider`), a container in no inventory group, for
negative tests.
Podman runs with CONTAINERS_CONF=lab/containers.conf (runc, explicit ulimits); see docs/lab.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import secrets
import shutil
import string
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
INVENTORY = REPO / "inventory" / "lab"
STATE_DIR = REPO / ".lab"
SECRETS_DIR = STATE_DIR / "secrets"
APT_ARCHIVES = STATE_DIR / "apt-archives"
# Generated on `create` unless present; the lab inventory reads them with the password lookup.
SECRET_NAMES = ("coordinator_db_password", "redis_password")
LABEL = "coordinator.lab.network"
# Held by every suite, benchmark or Molecule run that makes podman containers from this
# checkout, so they run one at a time (`flock .lab/molecule.lock molecule ...` by hand).
LOCK = STATE_DIR / "molecule.lock"
RECAP_LINE = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+[ \t]*)+)$", re.M)


@dataclass(frozen=True)
class Lab:
    network: str
    subnet: str
    image: str
    nodes: dict[str, str]  # container/host name -> address
    outsider: tuple[str, str]  # name, address of the container in no group


def load_lab(inventory: Path = INVENTORY) -> Lab:
    """Read the lab's network, image and hosts from the lab inventory."""
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    settings = yaml.safe_load((inventory / "group_vars" / "all" / "lab.yml").read_text())
    lab_nodes = hosts["all"]["children"]["lab_nodes"]["hosts"]
    nodes = {name: str(vars_["node_address"]) for name, vars_ in lab_nodes.items()}
    outsider = (str(settings["lab_outsider_name"]), str(settings["lab_outsider_address"]))
    return Lab(
        settings["lab_network"], settings["lab_subnet"], settings["lab_image"], nodes, outsider
    )


def podman(*args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
    """Run podman with the lab's containers.conf."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "lab" / "containers.conf"))
    return subprocess.run(
        ["podman", *args], check=check, env=env, text=True, capture_output=capture
    )


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold the lab lock for the block; say so when another run holds it and this one waits."""
    LOCK.parent.mkdir(exist_ok=True)
    with LOCK.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {LOCK} (another lab run holds it) ...", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def play_recap(output: str) -> dict[str, dict[str, int]]:
    """host -> {"ok": .., "changed": .., "unreachable": .., "failed": .., ...} from the
    PLAY RECAP of an ansible-playbook output."""
    return {host: {key: int(value) for key, value in
                   (pair.split("=") for pair in counts.split())}
            for host, counts in RECAP_LINE.findall(output)}


def podman_problem() -> str | None:
    """Why podman cannot run the lab's containers here, or None when it can."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc debootstrap)"
    info = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, capture=True)
    if info.returncode != 0:
        return f"podman cannot run here: {info.stderr.strip()[:300]}"
    return None


def exists(kind: str, name: str) -> bool:
    return podman(kind, "exists", name, check=False, capture=True).returncode == 0


def ensure_secrets() -> None:
    """Generate the lab-only secrets into .lab/secrets (mode 0600) unless they exist."""
    SECRETS_DIR.mkdir(parents=True, exist_ok=True)
    SECRETS_DIR.chmod(0o700)
    alphabet = string.ascii_letters + string.digits
    for name in SECRET_NAMES:
        path = SECRETS_DIR / name
        if path.exists() and path.read_text().strip():
            continue
        value = "".join(secrets.choice(alphabet) for _ in range(32))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(value + "\n")


def wait_for_systemd(name: str, timeout: int = 60) -> None:
    result = podman(
        "exec",
        name,
        "timeout",
        str(timeout),
        "systemctl",
        "is-system-running",
        "--wait",
        check=False,
        capture=True,
    )
    state = result.stdout.strip()
    if state not in ("running", "degraded"):
        raise SystemExit(f"{name}: systemd did not finish booting (state {state!r})")


def start_container(lab: Lab, name: str, address: str) -> None:
    if exists("container", name):
        podman("start", name, capture=True)
        return
    podman(
        "run",
        "--detach",
        "--name",
        name,
        "--hostname",
        name,
        "--network",
        lab.network,
        "--ip",
        address,
        "--systemd=always",
        "--label",
        f"{LABEL}={lab.network}",
        "--volume",
        f"{APT_ARCHIVES / name}:/var/cache/apt/archives",
        lab.image,
        "/sbin/init",
        capture=True,
    )


def create(lab: Lab, outsider: bool = False) -> None:
    started = time.monotonic()
    subprocess.run([str(REPO / "lab" / "image" / "build.sh")], check=True)
    ensure_secrets()
    if not exists("network", lab.network):
        podman("network", "create", "--subnet", lab.subnet, lab.network, capture=True)
    nodes = dict(lab.nodes)
    if outsider:
        nodes[lab.outsider[0]] = lab.outsider[1]
    for name, address in nodes.items():
        # One apt cache per container: apt's lock on it does not work across containers.
        (APT_ARCHIVES / name / "partial").mkdir(parents=True, exist_ok=True)
        start_container(lab, name, address)
    for name in nodes:
        wait_for_systemd(name)
    took = time.monotonic() - started
    print(f"lab up in {took:.0f} s: " + ", ".join(f"{n} {a}" for n, a in nodes.items()))


def labelled(lab: Lab) -> list[str]:
    """Containers this lab started (also the outsider), found by their label."""
    result = podman(
        "ps",
        "--all",
        "--filter",
        f"label={LABEL}={lab.network}",
        "--format",
        "{{.Names}}",
        capture=True,
    )
    return result.stdout.split()


def destroy(lab: Lab) -> None:
    for name in sorted(set(lab.nodes) | set(labelled(lab))):
        if exists("container", name):
            podman("rm", "--force", "--time", "5", name, capture=True)
    if exists("network", lab.network):
        podman("network", "rm", lab.network, capture=True)
    print("lab removed (secrets and the apt cache stay in .lab/)")


def status(lab: Lab) -> None:
    podman(
        "ps",
        "--all",
        "--filter",
        f"network={lab.network}",
        "--format",
        "{{.Names}}\t{{.Status}}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.lab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    create_parser = sub.add_parser("create", help="build the image, network and containers")
    create_parser.add_argument(
        "--outsider", action="store_true", help="also start the outsider (in no group)"
    )
    sub.add_parser("destroy", help="remove the containers and the network")
    sub.add_parser("status", help="list the lab's containers")
    parser.add_argument(
        "--inventory", type=Path, default=INVENTORY, help="lab inventory (default inventory/lab)"
    )
    args = parser.parse_args(argv)
    lab = load_lab(args.inventory)
    if args.command == "create":
        create(lab, outsider=args.outsider)
    elif args.command == "destroy":
        destroy(lab)
    else:
        status(lab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
