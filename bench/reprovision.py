#!/usr/bin/env python3
"""Benchmark re-provisioning: the wall time of a no-op ``site.yml`` on the container lab.

Builds its own copy of the three-node lab (containers ``bench-*`` on the podman network
``bench-lab``, 10.89.26.0/24, never the ``lab-*`` containers of other work), reached over
SSH as admin with sudo like the lab, converges it with ``lab/prepare.yml`` and ``site.yml``
(the first converge is timed too), then times further runs of ``site.yml``, each of which
must report ``changed=0`` on every host (otherwise the script stops and names the host and the
changed tasks). Variants, each repeated ``--repeats`` times, in rotation:

    plain        the repository's settings: SSH with ControlPersist and ``pipelining = true``
    nopipelining ANSIBLE_PIPELINING=0 (Ansible's own default)
    factcache    ANSIBLE_CACHE_PLUGIN=jsonfile, ANSIBLE_CACHE_PLUGIN_CONNECTION=<dir>,
                 ANSIBLE_GATHERING=smart (the cache filled once before the timed runs)
    mitogen      Mitogen for Ansible's ``mitogen_linear`` strategy (requirements-bench.txt;
                 its own connection, so the ssh/sftp/scp counts read 0)
    verbose      ``-vvv``, as the lab tests run every playbook (their output is searched for
                 secrets): what that verbosity costs the controller

Variants combine with ``+`` (``nopipelining+factcache``); ``variant:N`` sets its number of
runs. Every run counts its ssh, sftp and scp commands (two-line shell wrappers set as
Ansible's ``ssh_executable``, ``sftp_executable`` and ``scp_executable`` log each call, costing
one ``sh`` start per call) and the modules run, and has the ``ansible.posix.profile_tasks``
callback on, which gives the costliest tasks. Every Ansible run's output is kept in
``.lab/logs/reprovision/``.

``--nodes 3 6 9`` grows the lab: the extra nodes are inference workers (group
``inference_workers``, like ``lab-worker-fast``). Each size's inventory is generated from
inventory/lab into ``.lab/inventory-bench-<n>`` (two levels below the repository, so its
relative paths to ``.lab/secrets`` and ``.lab/wheelhouse`` resolve as inventory/lab's do); the
lab grows in place (only the new nodes and the new pg_hba.conf lines are converged). Forks are
at least the number of nodes. The script holds ``.lab/lab.lock`` while its containers
exist and removes them and the network at the end, also on Ctrl-C or SIGTERM. The figures in
docs/benchmarks.md come from:

    .venv/bin/python bench/reprovision.py --nodes 3 9 --variants plain:3 \\
        --scale-variants plain --scale-repeats 2

(``--budget``: no new run starts after that many minutes; the table has what was measured.)
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import common
import yaml

from lab import lab as lablib

REPO = common.ROOT
SOURCE_INVENTORY = REPO / "inventory" / "lab"
NETWORK = "bench-lab"
SUBNET = "10.89.26.0/24"
PREFIX = "bench-"
VENV_BIN = REPO / ".venv" / "bin"
# The callbacks ansible.cfg enables (ANSIBLE_CALLBACKS_ENABLED, set for profile_tasks,
# replaces them).
_CONFIG = configparser.ConfigParser()
_CONFIG.read(REPO / "ansible.cfg")
CONFIG_CALLBACKS = [name.strip() for name in
                    _CONFIG.get("defaults", "callbacks_enabled", fallback="").split(",") if name]
FEATURES = ("nopipelining", "factcache", "mitogen", "verbose")
CONNECTION_PROGRAMS = ("ssh", "sftp", "scp")

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
    # The extra nodes copy an inference worker that has no other part (lab-macbookair: Macs,
    # of the same node kind).
    template = next(h for h in groups["inference_workers"]["hosts"]
                    if sum(h in (g.get("hosts") or {}) for g in groups.values()) == 2)
    kind = {k: v for k, v in lab_nodes[template].items() if k == "lab_node_kind"}
    origin = {bench_name(h): h for h in lab_nodes}
    used = {int(ipaddress.ip_address(v["node_address"])) for v in lab_nodes.values()}
    last = max(used)
    for number in range(len(lab_nodes) + 1, nodes + 1):
        last += 1
        origin[f"{PREFIX}infer-{number}"] = template
        lab_nodes[f"{PREFIX}infer-{number}"] = {
            "node_address": str(ipaddress.ip_address(last)), **kind}
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

def write_logging_wrappers(directory: Path) -> dict[str, Path]:
    """ssh, sftp and scp that first log their arguments to $BENCH_CONNECTION_LOG."""
    wrappers = {}
    for program in CONNECTION_PROGRAMS:
        real = shutil.which(program)
        if real is None:
            raise SystemExit(f"{program} not found (apt-get install openssh-client)")
        wrapper = directory / f"{program}-logged"
        log_line = f"printf '{program} %s\\n' \"$*\" >> \"$BENCH_CONNECTION_LOG\""
        wrapper.write_text(f'#!/bin/sh\n{log_line}\nexec {real} "$@"\n')
        wrapper.chmod(0o755)
        wrappers[program] = wrapper
    return wrappers


@dataclass
class Run:
    seconds: float
    returncode: int
    output: str
    load: float
    recap: dict[str, dict[str, int]] = field(default_factory=dict)  # lab.play_recap
    calls: Counter[str] = field(default_factory=Counter)  # ssh / sftp / scp -> calls
    modules: int = 0  # ssh calls that ran a module (python on the node)

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
        return {host: r["changed"] for host, r in self.recap.items() if r["changed"]}

    @property
    def failed(self) -> dict[str, int]:
        return {host: r["unreachable"] + r["failed"] for host, r in self.recap.items()
                if r["unreachable"] + r["failed"]}

    @property
    def task_headers(self) -> int:
        return sum(1 for line in self.output.splitlines() if TASK_HEADER.match(line))

    @property
    def host_tasks(self) -> int:
        """Task results over all hosts: ok (changed included) + skipped + failed."""
        return sum(r["ok"] + r["unreachable"] + r["failed"] + r["skipped"]
                   for r in self.recap.values())


class Bench:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cache_dir = tmp / "facts"
        self.wrappers = write_logging_wrappers(tmp)
        self.logs = lablib.STATE_DIR / "logs" / "reprovision"
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir(parents=True)
        self.count = 0
        self.figures: list[Figures] = []

    def env(self, features: set[str], forks: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            CONTAINERS_CONF=str(REPO / "lab" / "containers.conf"),
            PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_FORKS=str(forks),
            ANSIBLE_PIPELINING="0" if "nopipelining" in features else "1",
            ANSIBLE_SSH_EXECUTABLE=str(self.wrappers["ssh"]),
            ANSIBLE_SFTP_EXECUTABLE=str(self.wrappers["sftp"]),
            ANSIBLE_SCP_EXECUTABLE=str(self.wrappers["scp"]),
            # ansible.cfg's own callbacks too: the variable replaces the setting.
            ANSIBLE_CALLBACKS_ENABLED=",".join([*CONFIG_CALLBACKS, "ansible.posix.profile_tasks"]),
            PROFILE_TASKS_TASK_OUTPUT_LIMIT="all", PROFILE_TASKS_SORT_ORDER="none")
        if "mitogen" in features:
            env.update(ANSIBLE_STRATEGY_PLUGINS=str(mitogen_strategies()),
                       ANSIBLE_STRATEGY="mitogen_linear")
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
        log = self.logs / f"{self.count:03d}-{label}.log"
        calls = self.logs / f"{self.count:03d}-{label}.connections"
        env = dict(self.env(features, forks), BENCH_CONNECTION_LOG=str(calls),
                   **(extra_env or {}))
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
        recap = lablib.play_recap(output)
        run = Run(seconds, proc.returncode, output, load, recap)
        if calls.exists():
            for line in calls.read_text().splitlines():
                program = line.split(maxsplit=1)[0]
                run.calls[program] += 1
                # With pipelining the module goes to python's stdin; without, its file runs.
                if program == "ssh" and ("python3'" in line or MODULE.search(line)):
                    run.modules += 1
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
        return (f"| {self.nodes} | {self.variant} | {len(seconds)} | "
                f"{statistics.median(seconds):.1f} | {min(seconds):.1f} | {max(seconds):.1f} | "
                f"{first.task_headers} | {first.host_tasks} | {first.calls['ssh']} "
                f"({first.modules} modules) | {min(loads):.1f}–{max(loads):.1f} |")


def describe(run: Run, label: str) -> None:
    """Where a run's time went: its connections, modules and costliest tasks."""
    print(f"    {label}: {run.task_headers} tasks, {run.host_tasks} task results, "
          + ", ".join(f"{k} {v}" for k, v in run.calls.most_common())
          + f" calls, {run.modules} module runs, "
          f"{run.calls['ssh'] / max(run.host_tasks, 1):.1f} ssh calls per task result")
    seconds = run.task_seconds
    spent = sum(seconds.values())
    print(f"      costliest tasks (profile_tasks, of {spent:.0f} s):")
    for name, cost in seconds.most_common(8):
        print(f"        {cost:6.1f} s  {name}")


def mitogen_strategies() -> Path:
    """The strategy plugins of Mitogen for Ansible, in the interpreter Ansible runs with."""
    found = subprocess.run(
        [str(VENV_BIN / "python"), "-c",
         "import ansible_mitogen, os; print(os.path.dirname(ansible_mitogen.__file__))"],
        capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise SystemExit("the mitogen variant needs Mitogen for Ansible in .venv: "
                         ".venv/bin/pip install -r requirements-bench.txt")
    return Path(found.stdout.strip()) / "plugins" / "strategy"


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
                verbosity = ["-vvv"] if "verbose" in features_of(variant) else []
                run = bench.run(["ansible-playbook", *verbosity, "site.yml"], inventory,
                                features_of(variant), forks,
                                f"noop-{nodes}-{variant.replace('+', '-')}-{repeat}")
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, nargs="+", default=[3],
                   help="lab sizes, increasing (default 3; the figures: 3 6 9)")
    p.add_argument("--variants", default="plain,nopipelining",
                   help="variants at the first size, comma-separated: plain, or features "
                        f"({', '.join(FEATURES)}) joined with +; variant:N for N runs")
    p.add_argument("--scale-variants", default="plain",
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
              f"{sum(r['changed'] for r in done.recap.values())}", flush=True)
    return spent


def report(bench: Bench, converges: list[tuple[int, float, str]]) -> None:
    print("\nconverge (prepare.yml + site.yml; the larger sizes add nodes to a converged lab):")
    for nodes, seconds, load in converges:
        print(f"  {nodes} nodes: {seconds:.0f} s   ({load})")
    print("\n| nodes | variant | runs | median s | min s | max s | tasks | task results "
          "| ssh calls (1st run) | load average |")
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
        with lablib.exclusive():
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
    common.exit_with(main)
