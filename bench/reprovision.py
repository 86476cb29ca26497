#!/usr/bin/env python3
"""Benchmark re-provisioning: the wall time of a no-op ``site.yml`` on the container lab.

Builds its own copy of the three-node lab (containers ``bench-*`` on the podman network
``bench-lab``, 10.89.26.0/24, never the ``lab-*`` containers of other work), converges it with
``lab/prepare.yml`` and ``site.yml``, then times further runs of ``site.yml``, each of which
must report ``changed=0`` on every host (otherwise the script stops and names the host and the
changed tasks). Variants, each repeated ``--repeats`` times, in rotation:

    plain        ANSIBLE_PIPELINING=0 (the podman connection has no pipelining anyway)
    pipelining   ANSIBLE_PIPELINING=1
    factcache    ANSIBLE_CACHE_PLUGIN=jsonfile, ANSIBLE_CACHE_PLUGIN_CONNECTION=<dir>,
                 ANSIBLE_GATHERING=smart (the cache filled once before the timed runs)
    execstdin    a connection plugin written by this script into a temporary directory: the
                 collection's podman plugin with pipelining allowed and the module sent on
                 the stdin of ``podman exec --interactive`` (the roles and playbooks are
                 unchanged; selected with ``-e ansible_connection=bench_podman``)

Variants combine with ``+`` (``pipelining+factcache``); ``variant:N`` sets its number of runs.
Every run counts its podman commands (``exec``, ``mount``, ``cp``; a two-line shell wrapper set
as the connection's ``podman_executable`` logs each call, costing one ``sh`` start per call)
and the Ansible modules run, and has the ``ansible.posix.profile_tasks`` callback on, which
gives the costliest tasks. Every Ansible run's output is kept in ``.lab/logs/reprovision/``.

``--nodes 3 6 9`` grows the lab: the extra nodes are inference workers (group
``inference_workers``, like ``lab-worker-fast``). Each size's inventory is generated from
inventory/lab into ``.lab/inventory-bench-<n>`` (two levels below the repository, so its
relative paths to ``.lab/secrets`` and ``.lab/wheelhouse`` resolve as inventory/lab's do); the
lab grows in place (only the new nodes and the new pg_hba.conf lines are converged). Forks are
at least the number of nodes. The script holds ``.lab/molecule.lock`` while its containers
exist and removes them and the network at the end, also on Ctrl-C or SIGTERM. The figures in
docs/benchmarks.md come from:

    .venv/bin/python bench/reprovision.py --nodes 3 6 9 --budget 72 --repeats 1 \
        --variants plain,pipelining,factcache,pipelining+factcache,execstdin+factcache \
        --scale-variants plain,execstdin+factcache
    .venv/bin/python bench/reprovision.py --nodes 6 --budget 20 --repeats 1 \
        --variants plain,execstdin+factcache

(``--budget``: no new run starts after that many minutes; the table has what was measured.)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import common
import yaml

from lab import lab as lablib

REPO = common.ROOT
SOURCE_INVENTORY = REPO / "inventory" / "lab"
LOCK = lablib.STATE_DIR / "molecule.lock"
NETWORK = "bench-lab"
SUBNET = "10.89.26.0/24"
PREFIX = "bench-"
VENV_BIN = REPO / ".venv" / "bin"
FEATURES = ("pipelining", "factcache", "execstdin")

RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+"
    r"skipped=(\d+)", re.M)
TASK_HEADER = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \*+$")
CHANGED = re.compile(r"^changed: \[([^\]\s]+)")
MODULE = re.compile(r"AnsiballZ_(\w+)\.py")
PROFILE_LINE = re.compile(r"^(.+?) -+ (\d+\.\d+)s$")


# -- inventories ---------------------------------------------------------------------------

def bench_name(name: str) -> str:
    return PREFIX + name.removeprefix("lab-")


def bench_address(address: str, source_subnet: str) -> str:
    old, new = ipaddress.ip_network(source_subnet), ipaddress.ip_network(SUBNET)
    offset = int(ipaddress.ip_address(address)) - int(old.network_address)
    return str(new.network_address + offset)


def make_inventory(nodes: int) -> tuple[Path, dict[str, str]]:
    """inventory/lab with bench-* hosts on bench-lab, plus inference workers up to ``nodes``.
    Returns the inventory and its {bench host: lab host whose role it copies}."""
    target = lablib.STATE_DIR / f"inventory-bench-{nodes}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(SOURCE_INVENTORY, target, ignore=shutil.ignore_patterns("host_vars"))
    settings_file = target / "group_vars" / "all" / "lab.yml"
    settings = yaml.safe_load(settings_file.read_text())
    source_subnet = settings["lab_subnet"]
    settings.update(
        lab_network=NETWORK, lab_subnet=SUBNET,
        lab_outsider_name=bench_name(settings["lab_outsider_name"]),
        lab_outsider_address=bench_address(settings["lab_outsider_address"], source_subnet))
    header = "---\n# Generated by bench/reprovision.py from inventory/lab.\n"
    settings_file.write_text(header + yaml.safe_dump(settings, sort_keys=False))

    hosts = yaml.safe_load((SOURCE_INVENTORY / "hosts.yml").read_text())
    groups = hosts["all"]["children"]
    lab_nodes = groups["lab_nodes"]["hosts"]
    if nodes < len(lab_nodes):
        raise SystemExit(f"--nodes {nodes}: the lab has {len(lab_nodes)} nodes at least")
    # The extra nodes copy an inference worker that has no other part (lab-worker-fast).
    template = next(h for h in groups["inference_workers"]["hosts"]
                    if sum(h in (g.get("hosts") or {}) for g in groups.values()) == 2)
    origin = {bench_name(h): h for h in lab_nodes}
    used = {int(ipaddress.ip_address(v["node_address"])) for v in lab_nodes.values()}
    last = max(used)
    for number in range(len(lab_nodes) + 1, nodes + 1):
        last += 1
        origin[f"{PREFIX}infer-{number}"] = template
        lab_nodes[f"{PREFIX}infer-{number}"] = {
            "node_address": str(ipaddress.ip_address(last))}
    for group in groups.values():
        members = group.get("hosts") or {}
        renamed = {}
        for host, host_vars in members.items():
            if host in origin.values():
                renamed[bench_name(host)] = host_vars
            else:
                renamed[host] = host_vars
        group["hosts"] = renamed
    for host_vars in groups["lab_nodes"]["hosts"].values():
        host_vars["node_address"] = bench_address(host_vars["node_address"], source_subnet)
    extra = [h for h, o in origin.items() if o == template and h != bench_name(template)]
    groups["inference_workers"]["hosts"].update(dict.fromkeys(extra))
    (target / "hosts.yml").write_text(header + yaml.safe_dump(hosts, sort_keys=False))

    for host, source in origin.items():
        shutil.copytree(SOURCE_INVENTORY / "host_vars" / source, target / "host_vars" / host)
    return target, origin


def seed_apt_cache(origin: dict[str, str]) -> None:
    """Start each bench node's apt cache from its lab counterpart's downloaded packages
    (copies; the lab's own directories are only read)."""
    for host, source in origin.items():
        mine, theirs = lablib.APT_ARCHIVES / host, lablib.APT_ARCHIVES / source
        if mine.exists() or not theirs.is_dir():
            continue
        shutil.copytree(theirs, mine, ignore=shutil.ignore_patterns("lock", "partial"))
        (mine / "partial").mkdir(exist_ok=True)


# -- ansible runs --------------------------------------------------------------------------

EXECSTDIN_PLUGIN = '''
"""containers.podman.podman with pipelining: the module goes to the stdin of
``podman exec --interactive``; the container is mounted only when a file is copied."""
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible.module_utils._text import to_native
from ansible_collections.containers.podman.plugins.connection.podman import (
    Connection as PodmanConnection)
import shlex


class Connection(PodmanConnection):
    transport = "bench_podman"
    has_pipelining = True

    def _connect(self):
        ConnectionBase._connect(self)
        self._connected = True
        return self

    def _mount(self):
        if self._mount_point is None:
            PodmanConnection._connect(self)

    @ensure_connect
    def exec_command(self, cmd, in_data=None, sudoable=False):
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        args = ["exec", "--interactive"] if in_data else ["exec"]
        if self.user:
            args.extend(("--user", self.user))
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")),
                            in_data)

    def put_file(self, in_path, out_path):
        self._mount()
        return PodmanConnection.put_file(self, in_path, out_path)

    def fetch_file(self, in_path, out_path):
        self._mount()
        return PodmanConnection.fetch_file(self, in_path, out_path)
'''


def write_podman_wrapper(path: Path) -> None:
    """podman that first logs its arguments to $BENCH_PODMAN_LOG (one line per call)."""
    podman = shutil.which("podman")
    if podman is None:
        raise SystemExit("podman not found")
    path.write_text(f'#!/bin/sh\nprintf \'%s\\n\' "$*" >> "$BENCH_PODMAN_LOG"\n'
                    f'exec {podman} "$@"\n')
    path.chmod(0o755)


def write_execstdin_plugin(directory: Path) -> None:
    """The plugin's options are the collection plugin's, read from its DOCUMENTATION (which
    Ansible parses from the file's source, so it is written in as a literal)."""
    from ansible_collections.containers.podman.plugins.connection import podman

    doc = re.sub(r"^(\s*)name: podman$", r"\1name: bench_podman", podman.DOCUMENTATION,
                 count=1, flags=re.M)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "bench_podman.py").write_text(f"DOCUMENTATION = {doc!r}\n{EXECSTDIN_PLUGIN}")


@dataclass
class Run:
    seconds: float
    returncode: int
    output: str
    load: float
    recap: dict[str, tuple[int, ...]] = field(default_factory=dict)
    podman: Counter[str] = field(default_factory=Counter)  # subcommand -> calls
    modules: Counter[str] = field(default_factory=Counter)  # module -> podman exec runs

    @property
    def task_seconds(self) -> Counter[str]:
        """profile_tasks' seconds per task name (summed over a name's includes)."""
        seconds: Counter[str] = Counter()
        summary = self.output.split("TASKS RECAP", 1)[1:]
        for line in (summary[0].splitlines() if summary else []):
            timed = PROFILE_LINE.match(line.strip())
            if timed:
                seconds[timed[1].strip()] += float(timed[2])
        return seconds

    @property
    def changed(self) -> dict[str, int]:
        return {host: r[1] for host, r in self.recap.items() if r[1]}

    @property
    def failed(self) -> dict[str, int]:
        return {host: r[2] + r[3] for host, r in self.recap.items() if r[2] + r[3]}

    @property
    def task_headers(self) -> int:
        return sum(1 for line in self.output.splitlines() if TASK_HEADER.match(line))

    @property
    def host_tasks(self) -> int:
        """Task results over all hosts: ok (changed included) + skipped + failed."""
        return sum(r[0] + r[2] + r[3] + r[4] for r in self.recap.values())


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cache_dir = tmp / "facts"
        self.plugin_dir = tmp / "connection_plugins"
        self.podman_wrapper = tmp / "podman-logged"
        write_podman_wrapper(self.podman_wrapper)
        self.logs = lablib.STATE_DIR / "logs" / "reprovision"
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir(parents=True)
        write_execstdin_plugin(self.plugin_dir)
        self.count = 0
        self.figures: list[Figures] = []

    def env(self, features: set[str], forks: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            CONTAINERS_CONF=str(REPO / "lab" / "containers.conf"),
            PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_FORKS=str(forks),
            ANSIBLE_PIPELINING="1" if features & {"pipelining", "execstdin"} else "0",
            ANSIBLE_CONNECTION_PLUGINS=str(self.plugin_dir),
            ANSIBLE_PODMAN_EXECUTABLE=str(self.podman_wrapper),
            ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
            PROFILE_TASKS_TASK_OUTPUT_LIMIT="all", PROFILE_TASKS_SORT_ORDER="none")
        if "factcache" in features:
            env.update(ANSIBLE_CACHE_PLUGIN="jsonfile",
                       ANSIBLE_CACHE_PLUGIN_CONNECTION=str(self.cache_dir),
                       ANSIBLE_GATHERING="smart")
        return env

    def run(self, argv: list[str], inventory: Path, features: set[str], forks: int,
            label: str, timeout: float | None = None, extra_env: dict[str, str] | None = None
            ) -> Run:
        """Run an ansible command; its output goes to a log file in the temporary directory."""
        self.count += 1
        cmd = [str(VENV_BIN / argv[0]), "-i", str(inventory), *argv[1:]]
        if "execstdin" in features:
            cmd += ["-e", "ansible_connection=bench_podman"]
        log = self.logs / f"{self.count:03d}-{label}.log"
        calls = self.logs / f"{self.count:03d}-{label}.podman"
        env = dict(self.env(features, forks), BENCH_PODMAN_LOG=str(calls), **(extra_env or {}))
        load = os.getloadavg()[0]
        started = time.monotonic()
        with open(log, "w+") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)  # its own session: only ours
                proc.wait()
                raise
            except BaseException:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
                raise
            seconds = time.monotonic() - started
            out.seek(0)
            output = out.read()
        recap = {m[0]: tuple(int(x) for x in m[1:]) for m in RECAP.findall(output)}
        run = Run(seconds, proc.returncode, output, load, recap)
        if calls.exists():
            for line in calls.read_text().splitlines():
                words = line.split(maxsplit=1)
                run.podman[words[0] if words else "?"] += 1
                module = MODULE.search(line)
                if module and words[0] == "exec":
                    run.modules[module[1]] += 1
        return run

    def fill_fact_cache(self, inventory: Path, forks: int) -> None:
        """The facts the first play of site.yml would gather, cached once. A play, not an
        ad-hoc ``setup``: only a play's gathering marks the cached facts as gathered, which
        ANSIBLE_GATHERING=smart looks for."""
        playbook = self.tmp / "gather.yml"
        playbook.write_text("- hosts: lab_nodes\n  gather_facts: true\n  tasks: []\n")
        done = self.run(["ansible-playbook", str(playbook)], inventory, {"factcache"}, forks,
                        "fill-fact-cache")
        if done.returncode != 0:
            raise SystemExit(f"filling the fact cache failed:\n{done.output[-3000:]}")


def changed_tasks(output: str) -> dict[str, list[str]]:
    """host -> names of the tasks reported changed, from the default callback's output."""
    task = "?"
    found: dict[str, list[str]] = defaultdict(list)
    for line in output.splitlines():
        header = TASK_HEADER.match(line)
        if header:
            task = header[1]
            continue
        changed = CHANGED.match(line)
        if changed and task not in found[changed[1]]:
            found[changed[1]].append(task)
    return found


def check_noop(run: Run, label: str) -> None:
    if run.returncode != 0 or run.failed or not run.recap:
        raise SystemExit(f"{label}: site.yml failed (rc {run.returncode}, failed/unreachable "
                         f"{run.failed}):\n{run.output[-4000:]}")
    if run.changed:
        tasks = changed_tasks(run.output)
        lines = [f"  {host}: changed={n}: " + "; ".join(tasks.get(host, ["?"]))
                 for host, n in sorted(run.changed.items())]
        raise SystemExit(f"{label}: the no-op run of site.yml changed something:\n"
                         + "\n".join(lines))


# -- the measurement -----------------------------------------------------------------------

@dataclass
class Figures:
    nodes: int
    variant: str
    runs: list[Run]

    def row(self) -> str:
        seconds = [r.seconds for r in self.runs]
        first = self.runs[0]
        loads = [r.load for r in self.runs]
        calls = sum(first.podman.values())
        return (f"| {self.nodes} | {self.variant} | {len(seconds)} | "
                f"{statistics.median(seconds):.1f} | {min(seconds):.1f} | {max(seconds):.1f} | "
                f"{first.task_headers} | {first.host_tasks} | {calls} "
                f"({first.podman['exec']} exec) | {min(loads):.1f}–{max(loads):.1f} |")


def describe(run: Run, label: str) -> None:
    """Where a run's time went: its podman calls, modules and costliest tasks."""
    calls = sum(run.podman.values())
    print(f"    {label}: {run.task_headers} tasks, {run.host_tasks} task results, podman calls "
          f"{calls} ({', '.join(f'{k} {v}' for k, v in run.podman.most_common())}), "
          f"{calls / max(run.host_tasks, 1):.1f} per task result")
    print("      modules run (podman exec of AnsiballZ_*): "
          + ", ".join(f"{k} {v}" for k, v in run.modules.most_common(8)))
    seconds = run.task_seconds
    spent = sum(seconds.values())
    print(f"      costliest tasks (profile_tasks, of {spent:.0f} s):")
    for name, cost in seconds.most_common(8):
        print(f"        {cost:6.1f} s  {name}")


def features_of(variant: str) -> set[str]:
    if variant == "plain":
        return set()
    names = set(variant.split("+"))
    unknown = names - set(FEATURES)
    if unknown:
        raise SystemExit(f"unknown variant feature(s) {sorted(unknown)}: use plain or "
                         f"{', '.join(FEATURES)} joined with +")
    return names


def parse_variants(spec: str, repeats: int) -> dict[str, int]:
    """'plain,factcache:2' -> {'plain': repeats, 'factcache': 2}"""
    variants: dict[str, int] = {}
    for item in spec.split(","):
        name, _, count = item.strip().partition(":")
        features_of(name)
        variants[name] = int(count) if count else repeats
    return variants


class OutOfTime(Exception):
    pass


def measure(bench: Bench, inventory: Path, nodes: int, variants: dict[str, int], forks: int,
            deadline: float) -> None:
    """Timed no-op runs of site.yml; their figures go to bench.figures."""
    if any("factcache" in features_of(v) for v in variants):
        shutil.rmtree(bench.cache_dir, ignore_errors=True)
        bench.fill_fact_cache(inventory, forks)
    runs: dict[str, list[Run]] = {v: [] for v in variants}
    try:
        for repeat in range(1, max(variants.values()) + 1):
            # In rotation, so changes of the machine's load hit every variant alike.
            for variant in [v for v, n in variants.items() if n >= repeat and v in runs]:
                if time.monotonic() > deadline:
                    raise OutOfTime
                label = f"{nodes} nodes, {variant}, run {repeat}"
                run = bench.run(["ansible-playbook", "site.yml"], inventory,
                                features_of(variant), forks,
                                f"noop-{nodes}-{variant.replace('+', '-')}-{repeat}")
                if run.returncode != 0 and "execstdin" in variant:
                    # The experimental connection is dropped, not the benchmark.
                    print(f"  {label}: FAILED (rc {run.returncode}), variant dropped:\n"
                          + "\n".join(run.output.splitlines()[-15:]), flush=True)
                    del runs[variant]
                    continue
                check_noop(run, label)
                runs[variant].append(run)
                print(f"  {label}: {run.seconds:6.1f} s  changed=0 on {len(run.recap)} hosts  "
                      f"(load {run.load:.1f})", flush=True)
                if repeat == 1:
                    describe(run, variant)
    except OutOfTime:
        print(f"  --budget reached: {nodes} nodes stop here", flush=True)
        raise
    finally:
        bench.figures += [Figures(nodes, v, r) for v, r in runs.items() if r]


@contextlib.contextmanager
def lab_lock() -> Iterator[None]:
    LOCK.parent.mkdir(exist_ok=True)
    with LOCK.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {LOCK.relative_to(REPO)} (another lab suite holds it) ...",
                  flush=True)
            waited = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_EX)
            print(f"  got it after {time.monotonic() - waited:.0f} s", flush=True)
        yield


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[3],
                   help="lab sizes, increasing (default 3; the figures: 3 6 9)")
    p.add_argument("--variants", default="plain,pipelining,factcache,pipelining+factcache",
                   help="variants at the first size, comma-separated: plain, or features "
                        f"({', '.join(FEATURES)}) joined with +; variant:N for N runs")
    p.add_argument("--scale-variants", default="plain,factcache",
                   help="variants at the larger sizes")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per variant")
    p.add_argument("--scale-repeats", type=int, default=0,
                   help="timed runs per variant at the larger sizes (default: --repeats)")
    p.add_argument("--converge-limit", type=float, default=1500,
                   help="seconds one size's converge may take before the larger sizes are "
                        "given up")
    p.add_argument("--budget", type=float, default=0,
                   help="minutes after which no new run or size starts (0: no limit)")
    return p.parse_args(argv)


def converge(bench: Bench, inventory: Path, nodes: int, forks: int, limit: float) -> float:
    """lab/prepare.yml then site.yml; the seconds both took, or NaN when over ``limit``."""
    spent = 0.0
    for playbook in ("lab/prepare.yml", "site.yml"):
        try:
            done = bench.run(["ansible-playbook", playbook], inventory, set(), forks,
                             f"converge-{nodes}-{Path(playbook).stem}",
                             timeout=max(60.0, limit - spent))
        except subprocess.TimeoutExpired:
            print(f"  {nodes} nodes: converge not done within {limit:.0f} s", flush=True)
            return float("nan")
        spent += done.seconds
        if done.returncode != 0 or done.failed:
            raise SystemExit(f"{playbook} failed on {nodes} nodes:\n{done.output[-5000:]}")
        print(f"  {playbook}: {done.seconds:.0f} s, changed "
              f"{sum(r[1] for r in done.recap.values())}", flush=True)
    return spent


def report(bench: Bench, converges: list[tuple[int, float, str]]) -> None:
    print("\nconverge (prepare.yml + site.yml; the larger sizes add nodes to a converged lab):")
    for nodes, seconds, load in converges:
        print(f"  {nodes} nodes: {seconds:.0f} s   ({load})")
    print("\n| nodes | variant | runs | median s | min s | max s | tasks | task results "
          "| podman calls (1st run) | load average |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for figure in bench.figures:
        print(figure.row())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted(set(args.nodes))
    first_variants = parse_variants(args.variants, args.repeats)
    scale_variants = parse_variants(args.scale_variants, args.scale_repeats or args.repeats)
    common.stop_on_sigterm()
    started = time.monotonic()
    deadline = started + args.budget * 60 if args.budget else float("inf")
    print(f"before: {common.uptime()}", flush=True)
    converges: list[tuple[int, float, str]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-reprovision-"))
    bench = Bench(tmp)
    largest: Path | None = None
    try:
        with lab_lock():
            deadline += time.monotonic() - started  # the wait for the lock is not ours
            for nodes in sizes:
                if time.monotonic() > deadline:
                    print(f"--budget reached: {nodes} nodes not measured")
                    break
                inventory, origin = make_inventory(nodes)
                the_lab = lablib.load_lab(inventory)
                if largest is None:
                    lablib.destroy(the_lab)  # a fresh lab: leftovers of an interrupted run
                largest = inventory
                seed_apt_cache(origin)
                lablib.create(the_lab)
                forks = max(10, nodes)
                print(f"\n{nodes} nodes: converging (lab/prepare.yml, site.yml; forks {forks})"
                      " ...", flush=True)
                seconds = converge(bench, inventory, nodes, forks, args.converge_limit)
                converges.append((nodes, seconds, common.uptime()))
                if seconds != seconds:  # NaN: over the limit, larger sizes given up
                    break
                variants = first_variants if nodes == sizes[0] else scale_variants
                print(f"{nodes} nodes: no-op runs of site.yml "
                      f"({', '.join(f'{v} x{n}' for v, n in variants.items())})", flush=True)
                try:
                    measure(bench, inventory, nodes, variants, forks, deadline)
                except OutOfTime:
                    break
    finally:
        if largest is not None:
            lablib.destroy(lablib.load_lab(largest))
        shutil.rmtree(tmp, ignore_errors=True)
        report(bench, converges)
    print(f"\nafter: {common.uptime()}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
