"""Create and destroy the container lab: a podman network and one systemd container per host.

    python -m lab.lab build                 build the node images and the real-inference kit
    python -m lab.lab create [--outsider]   build them (cached), the network, the containers
    python -m lab.lab destroy               remove the containers and the network
    python -m lab.lab status                show the lab's containers
    python -m lab.lab --inventory DIR ...   another lab inventory (default inventory/lab)
    python -m lab.lab up --network NAME --subnet CIDR NAME=ADDRESS[:KIND] ...
    python -m lab.lab down --network NAME NAME ...
                                            any set of nodes (molecule/create.yml, destroy.yml)

The hosts and their fixed addresses come from the lab inventory (inventory/lab/hosts.yml,
`node_address` of every host in the group `lab_nodes`), the network, subnet and image from
inventory/lab/group_vars/all/lab.yml, so the inventory is the one place that names them.
`--outsider` adds the outsider (`lab-outsider`), a container in no inventory group, for
negative tests. A host with `lab_node_kind: macos` (or NAME=ADDRESS:macos for `up`) is the
Mac-shaped node (lab/macos/node.py, its image from lab/macos/image/build.sh), reached as its
own login user instead of admin.

Every node is reached as a real host is: sshd runs in it, and Ansible logs in as the non-root
user `admin` with the key `.lab/ssh/id_ed25519`, then uses sudo with admin's password
(`.lab/ssh/admin_password`); the nodes' host keys are in `.lab/ssh/known_hosts`. All three are
made here, once per checkout (key, password) or per container (host key).
Podman runs with CONTAINERS_CONF=lab/containers.conf (runc, explicit ulimits); see docs/lab.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import fcntl
import ipaddress
import os
import re
import secrets
import shutil
import string
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
INVENTORY = REPO / "inventory" / "lab"
STATE_DIR = REPO / ".lab"
SECRETS_DIR = STATE_DIR / "secrets"
# The lab cluster CA (inventory/lab: cluster_tls_ca_dir); its key is encrypted with the
# secret cluster_ca_passphrase.
CLUSTER_CA_DIR = STATE_DIR / "cluster-ca"
CLUSTER_CA_CERT = CLUSTER_CA_DIR / "ca.crt"
# How Ansible reaches every lab and Molecule node (the inventories' connection settings).
SSH_DIR = STATE_DIR / "ssh"
SSH_KEY = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
ADMIN_PASSWORD = SSH_DIR / "admin_password"
ADMIN_USER = "admin"
# The redis role's admin user (roles/redis/defaults/main.yml redis_admin_user), whose
# password is the lab's redis_password: tests and benchmarks read the lab's Redis as it, since
# the `default` user is off.
REDIS_ADMIN_USER = "admin"
APT_ARCHIVES = STATE_DIR / "apt-archives"
# Generated on `create` unless present; the lab inventory reads them with the password lookup.
SECRET_NAMES = ("coordinator_db_password", "redis_password", "coordinator_token",
                "coordinator_metrics_token", "worker_token_key", "worker_db_key",
                "cluster_ca_passphrase")
LABEL = "coordinator.lab.network"
# Each set of containers has its own lock, held while it exists: the lab's (inventory/lab: its
# suites and benchmarks) and the Molecule scenarios' (`flock .lab/molecule.lock molecule ...`
# by hand). A Molecule scenario runs beside the lab, on its own network, names and addresses;
# two users of one set never do.
LOCK = STATE_DIR / "lab.lock"
MOLECULE_LOCK = STATE_DIR / "molecule.lock"
# Held briefly for what every set shares: the image build, the SSH identity, known_hosts.
SETUP_LOCK = STATE_DIR / "setup.lock"
RECAP_LINE = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+[ \t]*)+)$", re.M)


@dataclass(frozen=True)
class Kind:
    """What differs between the lab's kinds of node: how it is built, booted and logged in."""

    build: Path  # the image's build script (cached by its inputs)
    image: str | None  # None: the lab's image (inventory lab_image, `up --image`)
    command: tuple[str, ...]  # what the container runs as PID 1 (empty: the image's CMD)
    user: str  # the login user Ansible and the SSH check use
    home: str


def kinds() -> dict[str, Kind]:
    """linux: the Debian node; macos: the Mac-shaped one, its login user from its facts."""
    from lab.macos import node as mac  # imports this module: loaded on first use

    return {
        "linux": Kind(REPO / "lab" / "image" / "build.sh", None, ("/sbin/init",), ADMIN_USER,
                      f"/home/{ADMIN_USER}"),
        "macos": Kind(REPO / "lab" / "macos" / "image" / "build.sh",
                      mac.IMAGE, (), mac.USER, mac.HOME),
    }


@dataclass(frozen=True)
class Lab:
    network: str
    subnet: str
    image: str
    nodes: dict[str, str]  # container/host name -> address
    outsider: tuple[str, str]  # name, address of the container in no group
    coordinator_url: str | None  # the API of the Coordinator host (None: the lab has none)
    node_kinds: dict[str, str] = field(default_factory=dict)  # name -> kind, when not linux
    # name -> the container's name, where it differs (host var lab_container): a second lab
    # of the same hosts on its own network (second_lab_inventory).
    containers: dict[str, str] = field(default_factory=dict)
    # Where the nodes see the real-inference kit (lab/inference.py), mounted read-only.
    inference_mount: str | None = None
    # name -> the CPUs its container may use (host var lab_cpus), where limited.
    cpus: dict[str, float] = field(default_factory=dict)

    def container(self, name: str) -> str:
        return self.containers.get(name, name)


def load_lab(inventory: Path = INVENTORY) -> Lab:
    """Read the lab's network, image and hosts from the lab inventory."""
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    group_vars = inventory / "group_vars" / "all"
    settings = yaml.safe_load((group_vars / "lab.yml").read_text())
    lab_nodes = hosts["all"]["children"]["lab_nodes"]["hosts"]
    nodes = {name: str(vars_["node_address"]) for name, vars_ in lab_nodes.items()}
    node_kinds = {name: str(vars_["lab_node_kind"]) for name, vars_ in lab_nodes.items()
                  if "lab_node_kind" in vars_}
    containers = {name: str(vars_["lab_container"]) for name, vars_ in lab_nodes.items()
                  if "lab_container" in vars_}
    cpus = {name: float(vars_["lab_cpus"]) for name, vars_ in lab_nodes.items()
            if "lab_cpus" in vars_}
    outsider = (str(settings["lab_outsider_name"]), str(settings["lab_outsider_address"]))
    coordinator = hosts["all"]["children"].get("coordinator", {}).get("hosts") or {}
    url = None
    if coordinator:
        cluster = yaml.safe_load((group_vars / "cluster.yml").read_text())
        # The scheme the inventory's cluster_coordinator_url gives the workers' URLs.
        scheme = re.search(r"(https?)://", cluster["cluster_coordinator_url"]).group(1)
        url = f"{scheme}://{nodes[next(iter(coordinator))]}:{cluster['coordinator_port']}"
    return Lab(settings["lab_network"], settings["lab_subnet"], settings["lab_image"], nodes,
               outsider, url, node_kinds, containers, settings.get("lab_inference_mount"), cpus)


def second_lab_inventory(number: int, source: Path = INVENTORY,
                         target: Path | None = None) -> Path:
    """A copy of the lab inventory for lab ``number`` (2 or more) beside the first: the same
    hosts and settings on the network coordinator-lab<number>, the first lab's /24 moved up by
    number - 1 (10.89.21.0/24 for lab 2), each host in a container named lab<number>-<host>
    (``lab_container``). Written to
    .lab/inventory-lab<number>, two levels below the repository like inventory/lab, so its
    relative paths to .lab/ (secrets, the SSH key, the cluster CA, the wheelhouse) resolve
    the same way: the labs share them."""
    target = target or STATE_DIR / f"inventory-lab{number}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)  # links (cluster.yml) copied as the files they point to
    # The first lab's /24, moved up by one for each lab: 10.89.20.x -> 10.89.21.x for lab 2.
    first = ipaddress.ip_network(load_lab(source).subnet)
    first_net = str(first.network_address).rsplit(".", 1)[0] + "."
    net = str(first.network_address + 256 * (number - 1)).rsplit(".", 1)[0] + "."
    hosts_file = target / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    for name, vars_ in hosts["all"]["children"]["lab_nodes"]["hosts"].items():
        vars_["node_address"] = str(vars_["node_address"]).replace(first_net, net, 1)
        vars_["lab_container"] = f"lab{number}-{name.removeprefix('lab-')}"
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    lab_file = target / "group_vars" / "all" / "lab.yml"
    settings = yaml.safe_load(lab_file.read_text())
    settings["lab_network"] = f"{settings['lab_network']}{number}"
    settings["lab_subnet"] = settings["lab_subnet"].replace(first_net, net, 1)
    settings["lab_outsider_name"] = f"lab{number}-outsider"
    settings["lab_outsider_address"] = settings["lab_outsider_address"].replace(first_net, net, 1)
    lab_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return target


def verify_for(url: str) -> str | bool:
    """What a client (requests' ``verify``) checks the lab Coordinator's certificate
    against: the lab's cluster CA over HTTPS."""
    return str(CLUSTER_CA_CERT) if url.startswith("https://") else True


def podman(*args: str, check: bool = True, capture: bool = False,
           input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run podman with the lab's containers.conf."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(REPO / "lab" / "containers.conf"))
    return subprocess.run(
        ["podman", *args], check=check, env=env, text=True, capture_output=capture,
        input=input_text,
    )


@contextlib.contextmanager
def exclusive(path: Path | None = None) -> Iterator[None]:
    """Hold a lock (the lab's unless ``path`` names another) for the block; say so when
    another run holds it and this one waits."""
    path = path or LOCK
    path.parent.mkdir(exist_ok=True)
    with path.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {path} (another run holds it) ...", flush=True)
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


def write_secret(path: Path) -> str:
    """The secret in ``path`` (32 letters and digits, mode 0600), made on first use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    if path.exists() and path.read_text().strip():
        return path.read_text().split()[0]
    alphabet = string.ascii_letters + string.digits
    value = "".join(secrets.choice(alphabet) for _ in range(32))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value


def ensure_secrets() -> None:
    """Generate the lab-only secrets into .lab/secrets (mode 0600) unless they exist."""
    for name in SECRET_NAMES:
        write_secret(SECRETS_DIR / name)


def ensure_ssh_identity() -> tuple[str, str]:
    """The key pair Ansible logs in with and admin's sudo password: (public key, password)."""
    password = write_secret(ADMIN_PASSWORD)
    if not SSH_KEY.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "coordinator-lab",
                        "-f", str(SSH_KEY)], check=True)
    return SSH_KEY.with_suffix(".pub").read_text(), password


def wait_for_systemd(name: str, timeout: float = 60) -> None:
    """Until systemd in the container has booted (`systemctl is-system-running --wait`). Right
    after `podman run`, exec may not reach the container yet: try again until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = podman("exec", name, "timeout", str(max(1, round(deadline - time.monotonic()))),
                        "systemctl", "is-system-running", "--wait", check=False, capture=True)
        state = result.stdout.strip()
        if state in ("running", "degraded"):
            return
        if state or time.monotonic() > deadline:
            raise SystemExit(f"{name}: systemd did not finish booting (state {state!r}"
                             f"{': ' + result.stderr.strip()[-200:] if result.stderr else ''})")
        time.sleep(0.5)


# The cgroup of the nodes with a CPU limit (lab_cpus), and its CPU weight: a virtual machine's
# CPUs are its own, whatever its host runs beside it, where a container competes with every
# process of the machine. Podman's own parent (libpod_parent) weighs as much as one process
# or one session of them (the kernel's autogroups), so a loaded machine gave the
# Coordinator's node a third of its one CPU and its timings followed the test machinery's
# load. Weighted as sixteen, it gets its CPU up to its limit (--cpus), and no more.
DEDICATED_CPU_CGROUP = "lab_dedicated_cpus"
DEDICATED_CPU_WEIGHT = 16


def dedicated_cpu_parent() -> str:
    """The cgroup parent (podman's --cgroup-parent, cgroupfs) for a node whose CPUs are its
    own, made with its weight on cgroup v1 (cpu.shares) or v2 (cpu.weight, the cpu controller
    enabled below the root first). Where the weight cannot be set, the node runs with the
    default one, and this says so."""
    root = Path("/sys/fs/cgroup")
    try:
        if (root / "cpu" / "cpu.shares").exists():
            group, setting, value = root / "cpu" / DEDICATED_CPU_CGROUP, "cpu.shares", 1024
        else:
            group, setting, value = root / DEDICATED_CPU_CGROUP, "cpu.weight", 100
            if "cpu" not in (root / "cgroup.subtree_control").read_text().split():
                (root / "cgroup.subtree_control").write_text("+cpu\n")
        group.mkdir(exist_ok=True)
        (group / setting).write_text(f"{value * DEDICATED_CPU_WEIGHT}\n")
    except OSError as error:
        print(f"lab: the nodes with lab_cpus keep the default CPU weight ({error}): under "
              "load they get less than their CPUs", file=sys.stderr)
    return f"/{DEDICATED_CPU_CGROUP}"


def start_container(network: str, image: str, name: str, address: str,
                    command: tuple[str, ...] = ("/sbin/init",), hostname: str = "",
                    volumes: tuple[str, ...] = (), cpus: float | None = None,
                    net_admin: bool = False) -> None:
    """Run (or start again) the node's container; ``volumes`` are podman's --volume values
    beyond its apt cache, ``cpus`` its CPU limit, ``net_admin`` whether it may change its
    network as a virtual machine's root can."""
    # Made again before a start too: a reboot of the machine removes the cgroup.
    parent = dedicated_cpu_parent() if cpus else None
    if exists("container", name):
        podman("start", name, capture=True)
        return
    # One apt cache per container: apt's lock on it does not work across containers.
    (APT_ARCHIVES / name / "partial").mkdir(parents=True, exist_ok=True)
    options = [f"--volume={volume}" for volume in
               (f"{APT_ARCHIVES / name}:/var/cache/apt/archives", *volumes)]
    if cpus:
        options += [f"--cpus={cpus:g}", f"--cgroup-parent={parent}"]
    if net_admin:
        # What a virtual machine's root may do with its network and podman withholds: move an
        # address (keepalived's virtual address: CAP_NET_ADMIN) and send VRRP (CAP_NET_RAW).
        options.append("--cap-add=NET_ADMIN,NET_RAW")
    podman(
        "run",
        "--detach",
        "--name",
        name,
        "--hostname",
        hostname or name,
        "--network",
        network,
        "--ip",
        address,
        "--systemd=always",
        "--label",
        f"{LABEL}={network}",
        *options,
        image,
        *command,
        capture=True,
    )


def grant_access(name: str, public_key: str, password: str, kind: Kind) -> None:
    """Let Ansible in as a user does: the login user's authorized key, and for admin the
    password sudo asks (the Mac-shaped node's user has no sudo)."""
    user, home = kind.user, kind.home
    podman("exec", "--interactive", name, "sh", "-c",
           f"install -d -m 0700 -o {user} -g $(id -g {user}) {home}/.ssh"
           f" && cat > {home}/.ssh/authorized_keys"
           f" && chown {user}:$(id -g {user}) {home}/.ssh/authorized_keys"
           f" && chmod 0600 {home}/.ssh/authorized_keys",
           input_text=public_key, capture=True)
    if user == ADMIN_USER:
        podman("exec", "--interactive", name, "chpasswd",
               input_text=f"{ADMIN_USER}:{password}\n", capture=True)


def trust_host_key(name: str, address: str, timeout: float = 60) -> None:
    """Put the node's (new) host key in .lab/ssh/known_hosts, as `ssh-keyscan` does for a
    user, once sshd answers; Ansible then checks it (host_key_checking = true)."""
    deadline = time.monotonic() + timeout
    while True:
        scan = subprocess.run(["ssh-keyscan", "-T", "5", "-t", "ed25519", address],
                              capture_output=True, text=True, check=False)
        if scan.stdout.strip():
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: sshd does not answer on {address}:22 after "
                             f"{timeout:.0f} s: {scan.stderr.strip()[-300:]}")
        time.sleep(1)
    with exclusive(SETUP_LOCK):
        KNOWN_HOSTS.touch(mode=0o600)
        subprocess.run(["ssh-keygen", "-R", address, "-f", str(KNOWN_HOSTS)],
                       capture_output=True, check=False)
        with KNOWN_HOSTS.open("a") as known:
            known.write(scan.stdout)


def ssh_login(address: str, user: str = ADMIN_USER) -> subprocess.CompletedProcess:
    """`ssh <user>@<address> true` with the lab's key and known_hosts."""
    return subprocess.run(
        ["ssh", "-i", str(SSH_KEY), "-o", f"UserKnownHostsFile={KNOWN_HOSTS}",
         "-o", "BatchMode=yes", "-o", "ConnectTimeout=120", f"{user}@{address}", "true"],
        capture_output=True, text=True, check=False, timeout=180)


def build(of: Iterable[Kind], with_kit: bool) -> Path | None:
    """The images of the kinds ``of`` and, ``with_kit``, the real-inference kit, each made
    only when missing or made from other inputs (minutes once per machine, then about a
    second), side by side. Returns the kit's directory (None without it)."""
    with concurrent.futures.ThreadPoolExecutor(1) as builder:
        if with_kit:
            from lab import inference  # imports this module: loaded on first use

            kit = builder.submit(inference.ensure)
        with exclusive(SETUP_LOCK):
            for script in dict.fromkeys(kind.build for kind in of):
                subprocess.run([str(script)], check=True)
        return kit.result() if with_kit else None


def up(network: str, subnet: str, image: str, nodes: dict[str, str],
       node_kinds: dict[str, str] | None = None,
       hostnames: dict[str, str] | None = None, inference_mount: str | None = None,
       cpus: dict[str, float] | None = None) -> None:
    """Start (or restart) one systemd container per node at its address, reachable over SSH;
    ``node_kinds`` names the nodes that are not of kind linux, ``hostnames`` the ones whose
    host name is not their container's name; ``inference_mount``, where the nodes see the
    real-inference kit (built first when missing, beside the images); ``cpus``, the CPUs of
    the nodes that do not get all of the machine's."""
    started = time.monotonic()
    known = kinds()
    of = {name: known[(node_kinds or {}).get(name, "linux")] for name in nodes}
    kit = build(of.values(), with_kit=bool(inference_mount))
    volumes = (f"{kit}:{inference_mount}:ro",) if kit else ()
    with exclusive(SETUP_LOCK):
        public_key, password = ensure_ssh_identity()
    if not exists("network", network):
        podman("network", "create", "--subnet", subnet, network, capture=True)
    for name, address in nodes.items():
        start_container(network, of[name].image or image, name, address, of[name].command,
                        (hostnames or {}).get(name, name), volumes, (cpus or {}).get(name),
                        net_admin=of[name] is known["linux"])
    for name, address in nodes.items():
        wait_for_systemd(name)
        grant_access(name, public_key, password, of[name])
        trust_host_key(name, address)
        login = ssh_login(address, of[name].user)
        if login.returncode != 0:
            raise SystemExit(f"{name}: ssh {of[name].user}@{address} failed: "
                             f"{login.stderr.strip()[-300:]}")
    took = time.monotonic() - started
    print(f"lab up in {took:.0f} s: " + ", ".join(f"{n} {a}" for n, a in nodes.items()))


def remove_container(name: str, attempts: int = 5) -> None:
    """Remove the container, stopping it first (SIGTERM, SIGKILL after 5 s).

    ``podman rm --force`` can fail with exit status 2 ("running or paused") when the stop
    races systemd's own shutdown inside the container; the container then is still there,
    so it is killed and removed again, and only a container that outlives every attempt is
    an error, with podman's own words.
    """
    for attempt in range(attempts):
        removed = podman("rm", "--force", "--time", "5", name, check=False, capture=True)
        if removed.returncode == 0 or not exists("container", name):
            return
        podman("kill", name, check=False, capture=True)
        time.sleep(1 + attempt)
    raise SystemExit(f"{name}: podman rm --force failed {attempts} times (exit status "
                     f"{removed.returncode}): {removed.stderr.strip()[-300:]}; "
                     f"remove it with: podman rm --force {name}")


def down(network: str, names: list[str]) -> None:
    """Remove the named containers, those labelled with the network, and the network."""
    present = [name for name in sorted(set(names) | set(labelled(network)))
               if exists("container", name)]
    # One podman call stops them all at once (each may take its 5 s); remove_container then
    # deals with any that call left behind.
    if present:
        podman("rm", "--force", "--time", "5", *present, check=False, capture=True)
    for name in present:
        if exists("container", name):
            remove_container(name)
    if exists("network", network):
        podman("network", "rm", network, capture=True)


def create(lab: Lab, outsider: bool = False) -> None:
    ensure_secrets()
    nodes = {lab.container(name): address for name, address in lab.nodes.items()}
    if outsider:
        nodes[lab.outsider[0]] = lab.outsider[1]
    up(lab.network, lab.subnet, lab.image, nodes,
       {lab.container(name): kind for name, kind in lab.node_kinds.items()},
       {lab.container(name): name for name in lab.nodes}, lab.inference_mount,
       {lab.container(name): cpus for name, cpus in lab.cpus.items()})


def labelled(network: str) -> list[str]:
    """Containers started on ``network`` (the outsider too), found by their label."""
    result = podman(
        "ps",
        "--all",
        "--filter",
        f"label={LABEL}={network}",
        "--format",
        "{{.Names}}",
        capture=True,
    )
    return result.stdout.split()


def destroy(lab: Lab) -> None:
    down(lab.network, [lab.container(name) for name in lab.nodes])
    print("lab removed (secrets, the SSH key and the apt cache stay in .lab/)")


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
    create_parser = sub.add_parser("create", help="build the images, network and containers")
    create_parser.add_argument(
        "--outsider", action="store_true", help="also start the outsider (in no group)"
    )
    sub.add_parser("build", help="build the node images and the real-inference kit (cached)")
    sub.add_parser("destroy", help="remove the containers and the network")
    sub.add_parser("status", help="list the lab's containers")
    up_parser = sub.add_parser("up", help="start the given nodes (no inventory read)")
    up_parser.add_argument("--network", required=True)
    up_parser.add_argument("--subnet", required=True)
    up_parser.add_argument("--image", default="localhost/coordinator-lab-node:bookworm")
    up_parser.add_argument("nodes", nargs="+", metavar="NAME=ADDRESS[:KIND]",
                           help=f"KIND: {' or '.join(kinds())} (default linux)")
    down_parser = sub.add_parser("down", help="remove the given nodes and their network")
    down_parser.add_argument("--network", required=True)
    down_parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument(
        "--inventory", type=Path, default=INVENTORY, help="lab inventory (default inventory/lab)"
    )
    args = parser.parse_args(argv)
    if args.command == "up":
        nodes = dict(node.split("=", 1) for node in args.nodes)
        node_kinds = {name: where.split(":", 1)[1] for name, where in nodes.items()
                      if ":" in where}
        unknown = sorted(set(node_kinds.values()) - set(kinds()))
        if unknown:
            parser.error(f"unknown node kind {unknown[0]}: {' or '.join(kinds())}")
        up(args.network, args.subnet, args.image,
           {name: where.split(":", 1)[0] for name, where in nodes.items()}, node_kinds)
        return 0
    if args.command == "down":
        down(args.network, args.names)
        return 0
    if args.command == "build":
        build(kinds().values(), with_kit=True)
        return 0
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
