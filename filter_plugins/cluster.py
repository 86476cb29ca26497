# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the playbooks (site.yml, migrate-web.yml): what every host answered; and what
the roles share: the cluster's TLS files, whether a systemd unit is already as asked."""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# The programs' shared contract: how a worker host's own database login is derived. Read
# through module_utils/ (a link to files/coordinator_contract.py), which is also where a
# collection built from this repository (tests/sanity/collection.py) has it, beside plugins/.
_CONTRACT = Path(__file__).resolve().parents[1] / "module_utils" / "coordinator_contract.py"
_spec = importlib.util.spec_from_file_location("coordinator_contract_for_playbooks", _CONTRACT)
contract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contract)

# Ansible's unreachable message wraps ssh's own words: keep those.
_SSH_REASON = re.compile(r"over ssh: (.*)$", re.S)


def reach_problem(result: Mapping[str, Any] | None) -> str | None:
    """Why a host cannot be used, from its fact-gathering result, or None when it answered.
    The words follow the host's name ("lab-1 is unreachable (...)", "lab-1: sudo ...")."""
    if not result:
        return ": no answer recorded"
    message = " ".join(str(result.get("msg", "")).split()).removeprefix("Task failed: ")
    if result.get("unreachable"):
        reason = _SSH_REASON.search(message)
        return (f" unreachable ({reason.group(1) if reason else message}): bring it back "
                "(its network, sshd) or take it out of the inventory")
    if not result.get("failed"):
        return None
    if "Missing sudo password" in message:
        return (": sudo asks for a password and none was given: run with -K "
                "(--ask-become-pass) or set ansible_become_password (in the vault)")
    if "Incorrect sudo password" in message:
        return ": sudo refused the password given (-K or ansible_become_password): correct it"
    return f": {message}"


def reach_problems(hosts: Iterable[str], hostvars: Mapping[str, Any],
                   result_var: str = "cluster_reach") -> list[str]:
    """One line per reason a host of ``hosts`` cannot be used (from its registered
    ``result_var``), naming every host it applies to: "a, b: sudo asks for a password ..."."""
    grouped: dict[str, list[str]] = {}
    for host in hosts:
        problem = reach_problem(hostvars[host].get(result_var))
        if problem:
            grouped.setdefault(problem, []).append(host)
    lines = []
    for problem, names in grouped.items():
        verb = " are" if len(names) > 1 else " is"
        lines.append(", ".join(names) + (verb + problem if problem.startswith(" ") else problem))
    return lines


# The inventory groups whose hosts run workers, and those of the hosts that keep each worker
# host's pg_hba.conf line, login, grant and Redis user: the plays of site.yml and
# migrate-web.yml read them through the filters below (the postgresql_access and redis roles
# default to the same worker groups).
WORKER_GROUPS = ("web_workers", "inference_workers")
DATABASE_GROUP, REDIS_GROUP = "database", "redis"
STORE_GROUPS = (DATABASE_GROUP, REDIS_GROUP)


def worker_groups(groups: Mapping[str, Any], *extra: str) -> list[str]:
    """WORKER_GROUPS, then each group of ``extra`` the inventory has (one a run made for the
    hosts whose web worker leaves, which keep their grants until it is gone)."""
    return [*WORKER_GROUPS, *(group for group in extra if group in groups)]


def unreached_hosts(hosts: Iterable[str], hostvars: Mapping[str, Any],
                    result_var: str = "cluster_reach") -> list[str]:
    """The hosts of ``hosts`` whose registered ``result_var`` says they were unreachable."""
    return [host for host in hosts if (hostvars[host].get(result_var) or {}).get("unreachable")]


def coordinator_only_hosts(groups: Mapping[str, Any]) -> list[str]:
    """The hosts of the group coordinator that are in no worker or store group: what such a
    host runs, a run that proves its work through another Coordinator neither reads nor
    changes."""
    others = {host for group in (*WORKER_GROUPS, *STORE_GROUPS) for host in groups.get(group) or ()}
    return [host for host in groups.get("coordinator") or () if host not in others]


def passed_over(hosts: Iterable[str], unreached: Iterable[str], may_pass_over: Iterable[str],
                coordinator_hosts: Iterable[str]) -> list[str]:
    """The ``unreached`` hosts a run on ``hosts`` goes on without: those in ``may_pass_over``,
    while a host of ``coordinator_hosts`` answered (its Coordinator is the one the run proves
    its work through). None when no Coordinator host of the run answered."""
    hosts, unreached = list(hosts), list(unreached)
    if not [host for host in coordinator_hosts if host in hosts and host not in unreached]:
        return []
    allowed = set(may_pass_over)
    return [host for host in unreached if host in allowed]


def reach_outcome(hosts: Iterable[str], hostvars: Mapping[str, Any], groups: Mapping[str, Any],
                  pass_over_coordinators: bool = False) -> dict[str, Any]:
    """What the first play of a run makes of its hosts' answers (playbooks/tasks/reach.yml,
    from their registered cluster_reach and cluster_console): ``passed_over``, the unreachable
    hosts it goes on without (with ``pass_over_coordinators``: those that run a Coordinator
    and nothing else, while another Coordinator host answered); ``registry_host``, the first
    Coordinator host that answered (else the group's first, else None), where the registry is
    read; ``unusable``, one line per reason any other host cannot be used."""
    hosts = list(hosts)
    coordinators = list(groups.get("coordinator") or ())
    unreached = unreached_hosts(hosts, hostvars)
    over = passed_over(hosts, unreached,
                       coordinator_only_hosts(groups) if pass_over_coordinators else [],
                       coordinators)
    answering = [host for host in coordinators if host not in unreached]
    return {
        "passed_over": over,
        "registry_host": (answering or coordinators or [None])[0],
        "unusable": (reach_problems([host for host in hosts if host not in over], hostvars)
                     + reach_problems(hosts, hostvars, "cluster_console")),
    }


def _statuses(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    """(host, record) for each worker the worker role's status entry point published."""
    for host in hosts:
        for record in hostvars[host].get("worker_status") or ():
            yield host, record


def running_workers(hosts: Iterable[str], hostvars: Mapping[str, Any],
                    kind: str | None = None) -> list[dict[str, Any]]:
    """{host: its WORKER_HOST, pid} of each worker (of ``kind``) a service manager runs, as
    coordinator_workers takes them in ``expected``."""
    return [{"host": record["host"], "pid": record["pid"]}
            for _host, record in _statuses(hosts, hostvars)
            if record.get("running") and (kind is None or record["kind"] == kind)]


def worker_addresses(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> dict[str, str]:
    """WORKER_HOST address -> inventory host name, for coordinator_workers' messages."""
    return {record["host"]: host for host, record in _statuses(hosts, hostvars)}


def left_out_hosts(play_hosts: Iterable[str], groups: Mapping[str, Any],
                   hostvars: Mapping[str, Any], declared_group: str) -> list[dict[str, Any]]:
    """{host: address, name, declared_in} of each inventory host a run limited with
    ``--limit`` leaves out (``play_hosts``: ansible_play_hosts_all of a play on all hosts), as
    coordinator_workers takes them in ``left_out``: ``declared_in`` is ``declared_group``
    when the host is in it (groups and hostvars are the whole inventory's, whatever the
    limit). The address is the one its workers register with: the inventory's
    worker_node_address, else node_address (the worker role's default)."""
    run = set(play_hosts)
    declared = set(groups.get(declared_group) or ())
    left = []
    for name in groups.get("all") or ():
        values = hostvars[name]
        address = values.get("worker_node_address") or values.get("node_address")
        if name not in run and address:
            left.append({"host": str(address), "name": name,
                         "declared_in": declared_group if name in declared else None})
    return left


def _and(words: list[str]) -> str:
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def site_left_out(play_hosts: Iterable[str], groups: Mapping[str, Any],
                  worker_groups: Iterable[str] = WORKER_GROUPS,
                  database_group: str = DATABASE_GROUP,
                  redis_group: str = REDIS_GROUP) -> dict[str, str]:
    """The hosts a site.yml run on ``play_hosts`` (after ``--limit``) needs but leaves out,
    each with why. A worker host's pg_hba.conf line, login and grant are written on the
    database host, its Redis user on the Redis host: a worker host needs them. Those grants
    are derived from every worker host's records (coordinator_contract.worker_grants), and
    a run that wrote them without a left-out host's would drop its grant: the database and
    Redis hosts need every worker host. Followed until nothing is added."""
    workers = {h for group in worker_groups for h in groups.get(group) or ()}
    # What each store holds of a worker host, and how it is named.
    stores = {database_group: ("database", ["pg_hba.conf line", "login", "grant"]),
              redis_group: ("Redis", ["Redis user"])}
    held: dict[str, list[tuple[str, list[str]]]] = {}
    for group, store in stores.items():
        for host in groups.get(group) or ():
            held.setdefault(host, []).append(store)
    run = set(play_hosts)
    # The worker hosts named are the run's own; a run of a store alone pulls in every
    # worker host, which then pulls in the other stores for all of them.
    whose = ", ".join(sorted(run & workers)) or "every worker host"
    needed = set(run)
    reasons: dict[str, str] = {}
    while True:
        added: set[str] = set()
        if needed & workers:
            for host, kept in held.items():
                if host not in needed:
                    written = [thing for store in kept for thing in store[1]]
                    reasons[host] = (f"the {_and([store[0] for store in kept])} host, where "
                                     f"{whose}'s {_and(written)} "
                                     f"{'are' if len(written) > 1 else 'is'} written")
                    added.add(host)
        if needed & set(held):
            for host in workers - needed:
                reasons[host] = ("the grants written on the database and Redis hosts are "
                                 "derived from the workers of every worker host")
                added.add(host)
        if not added:
            return reasons
        needed |= added


def limit_refusal(left_out: Mapping[str, str], play_hosts: Iterable[str],
                  all_hosts: Iterable[str], now: str) -> str:
    """The one line that stops a run whose ``--limit`` leaves out hosts it needs
    (``left_out``: host -> why): those hosts, ``now`` (what is true at this moment) and the
    exact ``--limit`` to run with, the inventory's hosts in its order."""
    hosts = list(all_hosts)
    grouped: dict[str, list[str]] = {}
    for host in hosts:
        if host in left_out:
            grouped.setdefault(left_out[host], []).append(host)
    limit = [h for h in hosts if h in set(play_hosts) | set(left_out)]
    every = ", which is every host: the same as no --limit" if len(limit) == len(hosts) else ""
    return ("--limit leaves out hosts this run needs: "
            + "; ".join(f"{', '.join(names)} ({why})" for why, names in grouped.items())
            + f". {now}: run again with --limit {','.join(limit)}{every}")


def process_problems(results: Iterable[Mapping[str, Any]], want: Mapping[str, int | None],
                     program: str) -> list[str]:
    """What is wrong with the registered results of `pgrep -f <program>` looped over hosts:
    ``want`` maps a host to the count it must have (None: at least one; a host missing from
    it must have none).

    pgrep prints one pid a line and exits 1 when nothing matches, with GNU procps and BSD's
    (macOS) alike; the count is the number of pid lines, since macOS's pgrep has no count
    option (pgrep(1), macOS 15.5: ``pgrep [-Lafilnoqvx] ...``). Exit 2 and 3 are pgrep's own
    errors (STATUS_BADUSAGE, STATUS_ERROR in FreeBSD's usr.bin/pkill/pkill.c, which macOS's
    derives from; procps uses the same codes): named with pgrep's message, never read as
    "no process"."""
    problems = []
    for result in results:
        host = result["item"]
        if result.get("unreachable"):
            reason = _SSH_REASON.search(" ".join(str(result.get("msg", "")).split()))
            problems.append(f"{host} does not answer ({reason.group(1) if reason else 'ssh'})")
            continue
        if int(result.get("rc") or 0) > 1:
            said = " ".join(str(result.get("stderr") or result.get("msg") or "").split())
            problems.append(f"{host} cannot count its {program} processes: pgrep exited "
                            f"{result['rc']} ({said or 'no message'})")
            continue
        count = len([line for line in str(result.get("stdout") or "").splitlines()
                     if line.strip()])
        wanted = want.get(host, 0)
        if wanted is None and count == 0:
            problems.append(f"{host} runs no {program}")
        elif wanted is not None and count != wanted:
            race = (": two copies race for their queue; stop the one its service manager "
                    "does not own" if count > wanted else "")
            problems.append(f"{host} runs {count} {program} processes, expected {wanted}{race}")
    return problems


def _short(digest: str | None) -> str:
    """The 12 digits ``ollama list`` shows as a model's ID."""
    return (digest or "none")[:12]


def _same_model(a: str | None, b: str | None) -> bool:
    """The contract's rule (``llama3.2`` is ``llama3.2:latest``) for names that may be absent."""
    return a == b or contract.same_model(a or "", b or "")


def registered_model(workers: Iterable[Mapping[str, Any]] | None,
                     worker_id: str | None) -> str | None:
    """The model the registry lists the alive worker ``worker_id`` with (coordinator_workers'
    ``workers``): the web worker registers the one it summarises with, so this is what it
    serves. None when it is not listed alive or registered none (a web worker from before it
    registered its model)."""
    for worker in workers or ():
        if worker.get("worker_id") == worker_id and worker.get("models"):
            return worker["models"][0]
    return None


def _model_change(new_host: str, wanted: str | None, old_host: str,
                  theirs: Mapping[str, Any]) -> str:
    """The line for a new host the inventory names another model for than the old web worker
    serves: what is true, what the inventory asks, and where a model is changed."""
    return (f"the web worker on {old_host} serves {theirs['name']} (digest "
            f"{_short(theirs.get('digest'))}), the inventory names {wanted} for {new_host}: "
            f"a move keeps the model, so name {theirs['name']} in the inventory again "
            "(worker_ollama_model; cluster_model in inventory/home) for the move, then change "
            "the model with upgrade-model.yml (docs/upgrade-model.md)")


def model_change_problems(new_hosts: Iterable[str], old_hosts: Iterable[str],
                          hostvars: Mapping[str, Any]) -> list[str]:
    """One line for each new host the inventory names another model for than an old host's
    web worker serves, from the ``worker_model`` each published (worker role, ``tasks_from:
    model``; an old host's names the model its web worker registered with). Only names:
    migrate-web.yml asks it before any change, when a new host's Ollama may not have the
    model yet."""
    problems = []
    old = [(host, hostvars[host].get("worker_model") or {}) for host in old_hosts]
    for new_host in new_hosts:
        wanted = (hostvars[new_host].get("worker_model") or {}).get("name")
        problems.extend(_model_change(new_host, wanted, old_host, theirs)
                        for old_host, theirs in old
                        if theirs.get("name") and not _same_model(wanted, theirs["name"]))
    return problems


def model_digest_problems(new_hosts: Iterable[str], old_hosts: Iterable[str],
                          hostvars: Mapping[str, Any],
                          override: str = "-e migrate_web_allow_other_weights=true") -> list[str]:
    """Why a new host's web worker would not serve the weights the old hosts' serve, one line
    each, from the ``worker_model`` each host published (worker role, ``tasks_from: model``).
    An old host whose Ollama lists no such model serves raw results: nothing to keep."""
    problems = []
    old = [(host, hostvars[host].get("worker_model") or {}) for host in old_hosts]
    for host, model in old:
        if model.get("error"):
            problems.append(f"cannot tell which weights {host}'s web worker serves "
                            f"({model['error']}): start its Ollama, or pass {override}")
    for new_host in new_hosts:
        mine = hostvars[new_host].get("worker_model") or {}
        if mine.get("error"):
            problems.append(f"cannot tell which weights {new_host} would serve "
                            f"({mine['error']})")
            continue
        for old_host, theirs in old:
            if theirs.get("error") or not theirs.get("digest") or (
                    mine.get("digest") == theirs["digest"]):
                continue
            if _same_model(mine.get("name"), theirs.get("name")):
                problems.append(
                    f"same model name, other weights: {new_host} has {mine['name']} "
                    f"{_short(mine.get('digest'))}, {old_host} serves {_short(theirs['digest'])}: "
                    f"pull {theirs['digest']} on {new_host} or pin it, or pass {override}")
            else:
                problems.append(_model_change(new_host, mine.get("name"), old_host, theirs))
    return problems


def model_summary(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> str:
    """``host: model (digest 12 digits)`` for each host's published ``worker_model``."""
    lines = []
    for host in hosts:
        model = hostvars[host].get("worker_model") or {}
        lines.append(f"{host}: {model.get('name')} (digest {_short(model.get('digest'))})")
    return "; ".join(lines)


def has_model(names: Iterable[str], model: str) -> bool:
    """Whether ``model`` is among ``names`` by the contract's rule (``llama3.2`` is
    ``llama3.2:latest``): upgrade-model.yml asks it of the models a host's workers run with."""
    return contract.has_model(names, model)


def hosts_to_upgrade(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The hosts whose workers do not run with the model the inventory names for them yet,
    from what each published (worker_model, upgrade_model_from)."""
    return [host for host in hosts
            if not has_model(hostvars[host]["upgrade_model_from"],
                             hostvars[host]["worker_model"]["name"])]


def upgrade_plan(hosts: Iterable[str], hostvars: Mapping[str, Any], canary: str) -> str:
    """What upgrade-model.yml is about to do, in one line: each worker host's model now and
    the one the inventory names."""
    moves = []
    for host in hosts:
        serving = hostvars[host]["upgrade_model_from"]
        now = ", ".join(serving) or "no worker installed"
        wanted = hostvars[host]["worker_model"]["name"]
        kept = len(serving) == 1 and contract.same_model(serving[0], wanted)
        moves.append(f"{host}: {now} (kept)" if kept else f"{host}: {now} -> {wanted}")
    return f"canary {canary}; " + "; ".join(moves)


def model_probes(records: Iterable[Mapping[str, Any]], count: int | None = None
                 ) -> list[dict[str, Any]]:
    """Tasks that only the given workers (worker role status records) can take: a web search
    for the web worker (on its host), a chat for each inference worker (routed to it).
    ``count`` tasks taking turns between them, or one each when None."""
    probes = []
    for record in records:
        if record.get("state", "present") != "present":
            continue
        if record.get("kind") == "web":
            probes.append({"task_type": "web_search", "target_worker": None,
                           "worker_host": record["host"]})
        elif record.get("kind") == "inference":
            probes.append({"task_type": "chat", "target_worker": record["worker_id"],
                           "worker_host": record["host"]})
    if count is None or not probes:
        return probes
    return [probes[index % len(probes)] for index in range(int(count))]


def _percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))
    return ordered[int(rank) - 1]


def sample_stats(results: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Figures of routed test tasks (looped coordinator_task results): how many, how many
    failed (with the first error), the fallback rate and p50/p95 seconds of those done."""
    results = list(results)
    done = [r for r in results if r.get("status") == "done"]
    failed = [r for r in results if r.get("status") != "done"]
    seconds = [float(r["seconds"]) for r in done if r.get("seconds") is not None]
    return {
        "count": len(results),
        "failed": len(failed),
        "first_error": next((str(r.get("error") or r.get("msg")) for r in failed), None),
        "fallback_rate": (sum(1 for r in done if r.get("fallback")) / len(done)) if done else 0.0,
        "p50": _percentile(seconds, 0.5),
        "p95": _percentile(seconds, 0.95),
    }


def canary_gates(baseline: Mapping[str, Any], canary: Mapping[str, Any],
                 max_p95_increase: float = 0.2, max_fallback_increase: float = 0.0
                 ) -> list[str]:
    """Each gate the canary's figures fail, saying by how much: none failed, fallback rate
    not above the baseline's (+ ``max_fallback_increase``), p95 at most ``max_p95_increase``
    above the baseline's."""
    problems = []
    if canary["failed"]:
        problems.append(f"gate 'none failed': {canary['failed']} of {canary['count']} tasks "
                        f"failed (first: {canary['first_error']})")
    allowed = baseline["fallback_rate"] + max_fallback_increase
    if canary["fallback_rate"] > allowed + 1e-9:
        problems.append(f"gate 'fallback rate': {canary['fallback_rate']:.0%} on the canary, "
                        f"{baseline['fallback_rate']:.0%} before, at most {allowed:.0%} allowed")
    if canary["p95"] is not None and baseline["p95"]:
        increase = canary["p95"] / baseline["p95"] - 1
        if increase > max_p95_increase:
            problems.append(f"gate 'p95': {canary['p95']:.2f} s on the canary, "
                            f"{baseline['p95']:.2f} s before: {increase:+.0%}, at most "
                            f"{max_p95_increase:+.0%} allowed")
    return problems


def upgrade_rows(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """The summary table of upgrade-model.yml, one line per host, from what each host's
    plays published (upgrade_model_row)."""
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = ["host | model | digest | before p50/p95 s | after p50/p95 s | fallback | verdict"]
    for host in hosts:
        row = hostvars[host].get("upgrade_model_row") or {}
        before, after = row.get("baseline") or {}, row.get("sample") or {}
        fallback = "-" if not after else f"{after.get('fallback_rate', 0):.0%}"
        lines.append(" | ".join([
            host, str(row.get("model", "-")), _short(row.get("digest")),
            f"{seconds(before.get('p50'))}/{seconds(before.get('p95'))}",
            f"{seconds(after.get('p50'))}/{seconds(after.get('p95'))}",
            fallback, str(row.get("verdict", "not reached"))]))
    return lines


def worker_db_login(host: str, key: str) -> dict[str, str]:
    """{name, password} of a worker host's own PostgreSQL login, as the postgresql_access and
    worker roles derive it from ``key``."""
    return {"name": contract.worker_db_role(host),
            "password": contract.worker_db_password(key, host)}


def worker_redis_login(host: str, key: str) -> dict[str, str]:
    """{name, password} of a worker host's own Redis ACL user, as the redis and worker roles
    derive it from ``key``."""
    return {"name": contract.worker_redis_user(host),
            "password": contract.worker_redis_password(key, host)}


def coordinator_redis_login(key: str) -> dict[str, str]:
    """{name, password} of the Coordinator's Redis ACL user, its password derived from
    ``key`` (the Redis admin password), as the redis role sets it."""
    return {"name": contract.COORDINATOR_REDIS_USER,
            "password": contract.coordinator_redis_password(key)}


def cluster_tls_files(directory: str) -> dict[str, str]:
    """The files of the cluster's TLS directory on a host (role cluster_tls): ``ca`` (the
    cluster CA's certificate, which clients verify against), ``cert`` and ``key`` (a server
    host's own). The one place that names them: the role writes them, the inventory points
    the services and the workers' DSNs at them."""
    base = str(directory).rstrip("/")
    return {"ca": f"{base}/ca.crt", "cert": f"{base}/server.crt", "key": f"{base}/server.key"}


def units_not_as_asked(units: Mapping[str, Mapping[str, Any] | None], state: str,
                       enabled: bool) -> list[str]:
    """The units of ``units`` (host_state's read) not yet ``state`` (started: active,
    stopped: inactive) and ``enabled`` (enabled, or disabled): the ones
    ansible.builtin.systemd_service must be run for. Any other state (activating, failed,
    static, not found, systemd not answering) is left to it."""
    asked = ("active" if state == "started" else "inactive",
             "enabled" if enabled else "disabled")
    return [name for name, unit in units.items()
            if ((unit or {}).get("ActiveState"), (unit or {}).get("UnitFileState")) != asked]


def agents_not_as_asked(agents: Mapping[str, Mapping[str, Any] | None], state: str,
                        enabled: bool | None = None) -> list[str]:
    """The launchd agents of ``agents`` (host_state's read) not yet ``state`` (started:
    loaded and running, stopped: not loaded) and ``enabled`` (None: either, as launchd_agent
    leaves it unset): the ones launchd_agent must be run for. One not running though loaded
    (exited, waiting for a respawn) is left to it, as is one launchd did not answer for."""
    def as_asked(agent: Mapping[str, Any] | None) -> bool:
        if agent is None or enabled not in (None, agent["enabled"]):
            return False
        return agent["loaded"] and agent["running"] if state == "started" else not agent["loaded"]

    return [label for label, agent in agents.items() if not as_asked(agent)]


def paths_found(files: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """The paths host_state's read of ``files`` found something at."""
    return [path for path, found in files.items() if found is not None]


def directories_not_in_place(paths: Iterable[str],
                             files: Mapping[str, Mapping[str, Any] | None],
                             mode: str, owner: str | None = None,
                             group: str | None = None) -> list[str]:
    """The ``paths`` that host_state's read of ``files`` does not find a directory with
    ``mode`` (and ``owner`` and ``group``, when given): the ones ansible.builtin.file (state
    directory, those attributes) must be run for."""
    wanted = {"type": "directory", "mode": mode, "owner": owner, "group": group}
    return [path for path in paths
            if any(value is not None and (files.get(path) or {}).get(key) != value
                   for key, value in wanted.items())]


def rendered_in_place(found: Mapping[str, Any] | None, text: str,
                      attributes: Mapping[str, Any]) -> bool:
    """Whether host_state's read of a file (``found``) is ``text`` (a template rendered on
    the controller, compared by SHA-1, as ansible.builtin.stat reports a checksum) with the
    ``owner``, ``group`` and ``mode`` of ``attributes`` (those not given: any): then
    ansible.builtin.template would change nothing, and is not run (even then it costs two
    module runs)."""
    if not found or found.get("type") != "file":
        return False
    return (found.get("checksum") == hashlib.sha1(text.encode()).hexdigest()
            and _attributes_in_place(found, attributes))


def _attributes_in_place(found: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    """Whether host_state's read of a file has the ``owner``, ``group`` and ``mode`` of
    ``attributes`` (those not given: any)."""
    return all(attributes.get(key) in (None, found.get(key)) for key in ("owner", "group", "mode"))


def block_in_place(text: str | None, marker: str, block: str,
                   found: Mapping[str, Any] | None = None,
                   attributes: Mapping[str, Any] | None = None) -> bool:
    """Whether ansible.builtin.blockinfile (``marker`` with {mark} as BEGIN and END, the
    block put at the end of the file when its markers are not there) would leave ``text``
    (host_state's read of the file's text) as it is: the last BEGIN and the last END marker
    lines, in that order, around exactly ``block``'s lines, as the module compares them;
    and, given ``attributes``, the file (``found``, host_state's read of it) has them."""
    if text is None or not block:
        return False
    if attributes and not (found and _attributes_in_place(found, attributes)):
        return False
    begin, end = (marker.replace("{mark}", word) + "\n" for word in ("BEGIN", "END"))
    wanted = [begin, *(block if block.endswith("\n") else block + "\n").splitlines(True), end]
    lines = text.splitlines(True)
    starts = [i for i, line in enumerate(lines) if line == begin]
    ends = [i for i, line in enumerate(lines) if line == end]
    if not starts or not ends or starts[-1] > ends[-1]:
        return False
    return lines[starts[-1]:ends[-1] + 1] == wanted


def models_to_pull(models: Iterable[str], tags_answer: Mapping[str, Any] | None,
                   pins: Mapping[str, str] | None = None) -> list[str]:
    """Of ``models``, those to hand to ollama_model, from host_state's read of Ollama's
    ``GET /api/tags`` (``{status, json}``, or None when it did not answer): every one unless
    it answered 200 with its list; else each it does not list with the pinned weights
    (``pins``: model -> digest), and each with a bad pin (the pull says why)."""
    tags = (tags_answer or {}).get("json") if (tags_answer or {}).get("status") == 200 else None
    if not isinstance(tags, dict) or not isinstance(tags.get("models"), list):
        return list(models)
    wanted = []
    for model in models:
        pin = (pins or {}).get(model)
        try:
            entry = contract.find_model(model, tags)
            listed = entry is not None and (
                pin is None or contract.normalize_digest(pin) == entry.get("digest"))
        except (ValueError, AttributeError):
            listed = False
        if not listed:
            wanted.append(model)
    return wanted


#: What the vault example (inventory/*/group_vars/all/vault.yml.example) leaves in a secret.
SECRET_PLACEHOLDER = "CHANGE_ME"


def unset_secrets(names: Iterable[str], values: Iterable[Any]) -> str:
    """The one line naming each of ``names`` (their ``values`` in the same order, as one
    ``query('ansible.builtin.vars', *names, default='')`` reads them) whose secret is not
    set: not a string, empty, or still the vault example's placeholder; "" when all are."""
    unset = [name for name, value in zip(names, values, strict=True)
             if not isinstance(value, str) or not value or value == SECRET_PLACEHOLDER]
    if not unset:
        return ""
    one = len(unset) == 1
    return (f"{', '.join(unset)} {'is' if one else 'are'} not set (missing, empty or still "
            f"{SECRET_PLACEHOLDER}): add {'it' if one else 'them'} to "
            "inventory/<name>/group_vars/all/vault.yml (copy vault.yml.example, fill it in, "
            "then ansible-vault encrypt it)")


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "cluster_tls_files": cluster_tls_files,
            "units_not_as_asked": units_not_as_asked,
            "agents_not_as_asked": agents_not_as_asked,
            "directories_not_in_place": directories_not_in_place,
            "paths_found": paths_found,
            "models_to_pull": models_to_pull,
            "block_in_place": block_in_place,
            "rendered_in_place": rendered_in_place,
            "unset_secrets": unset_secrets,
            "worker_db_login": worker_db_login,
            "worker_redis_login": worker_redis_login,
            "coordinator_redis_login": coordinator_redis_login,
            # A Coordinator's PG_DSN, as the workers' (the worker role's records).
            "pg_dsn": contract.pg_dsn,
            "reach_problems": reach_problems,
            "reach_outcome": reach_outcome,
            "worker_groups": worker_groups,
            "running_workers": running_workers,
            "worker_addresses": worker_addresses,
            "left_out_hosts": left_out_hosts,
            "site_left_out": site_left_out,
            "limit_refusal": limit_refusal,
            "process_problems": process_problems,
            "registered_model": registered_model,
            "model_change_problems": model_change_problems,
            "model_digest_problems": model_digest_problems,
            "model_summary": model_summary,
            "model_probes": model_probes,
            "has_model": has_model,
            "hosts_to_upgrade": hosts_to_upgrade,
            "upgrade_plan": upgrade_plan,
            "sample_stats": sample_stats,
            "canary_gates": canary_gates,
            "upgrade_rows": upgrade_rows,
        }
