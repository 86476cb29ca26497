"""postgresql_access: one pg_hba.conf line per worker host, /128 for IPv6 and /32 for IPv4.

The role's own preflight, vars and templates run from tests/roles/playbooks/pg_hba_block.yml
against a test inventory (nothing connects to the worker hosts). The rendered block is then
given to a throwaway PostgreSQL (lab/throwaway.py): its pg_hba_file_rules view says whether it
parses every line and which netmask it reads, and a login over ::1 shows that an IPv6 line
admits its host and that a host leaving the worker groups is refused again.
"""

from __future__ import annotations

import ipaddress
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lab.throwaway import DB_NAME, DB_USER, ThrowawayPostgres

from .conftest import HERE, run

PLAYBOOK = HERE / "playbooks" / "pg_hba_block.yml"
PREFLIGHT = ("postgresql_access : Preflight | every worker and Coordinator host has an IP "
             "address for its pg_hba.conf line")

# Worker hosts and their node_address, in several spellings PostgreSQL accepts. `lo6` is ::1,
# where the throwaway server listens, so its line is the one a real login goes through.
WORKERS = {
    "ai4": "192.168.0.43",
    "mac6": "fd00::43",
    "full6": "2001:db8:0:0:0:0:0:1",
    "upper6": "FD00::A",
    "seven6": "1:2:3:4:5:6::8",
    "trailing6": "fe80::",
    "mapped6": "::ffff:192.168.0.44",
    "lo6": "::1",
}
# Its address only in ansible_host (no node_address): the role falls back to it.
FALLBACK = ("fallback6", "2001:db8::7")

# Addresses the preflight must refuse. Every one of them passed the old, looser check and
# gave a pg_hba.conf line PostgreSQL cannot parse (bad5 even split the line in two).
MALFORMED = {
    "bad1": "fd00::1::2",      # two "::"
    "bad2": "fd00:::1",        # ":::"
    "bad3": "1:2:3",           # too few groups, no "::"
    "bad4": "1:2:3:4:5:6:7:8:9",  # too many groups
    "bad5": "fd00::1\n",       # trailing newline (a YAML folded scalar)
    "bad6": "12345::1",        # group of five digits
    "bad7": "1::2:3:4:5:6:7:8",  # "::" standing for no group at all
    "bad8": "fd00::1/64",      # a prefix length
    "bad9": ":1::2",           # single leading colon
    "bad10": "1::2:",          # single trailing colon
    "bad11": "::ffff:192.168.0.256",  # embedded IPv4 octet out of range
    "bad12": "192.168.0.300",  # IPv4 octet out of range
    "bad13": "192.168.0",      # three octets
    "bad14": "worker.local",   # a name
    "bad15": "",               # nothing
}

ALL_ONES_V6 = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"


def inventory(workers: dict[str, str], fallback: tuple[str, str] | None = None) -> dict:
    """A database host (IPv6 LAN address) and the workers split over both worker groups."""
    names = sorted(workers)
    web = {name: {"node_address": workers[name]} for name in names[::2]}
    inference = {name: {"node_address": workers[name]} for name in names[1::2]}
    # One host in both groups: it must still get exactly one line.
    if names:
        inference[names[0]] = {"node_address": workers[names[0]]}
    if fallback is not None:
        web[fallback[0]] = {"ansible_host": fallback[1]}
    return {"all": {
        "hosts": {"db": {"node_address": "fd00::40", "ansible_python_interpreter": sys.executable}},
        "children": {"database": {"hosts": {"db": None}},
                     "web_workers": {"hosts": web},
                     "inference_workers": {"hosts": inference}}}}


def render(tmp: Path, inv: dict) -> tuple[int, dict, dict]:
    """Run the playbook; return its exit code, its JSON report and the rendered texts."""
    (tmp / "hosts.yml").write_text(json.dumps(inv))
    result = run(["ansible-playbook", str(PLAYBOOK), "-i", str(tmp / "hosts.yml")],
                 ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON report from ansible-playbook:\n{result.stdout[-3000:]}"
                    f"\n{result.stderr[-3000:]}")
    facts = {}
    for task in report["plays"][0]["tasks"]:
        facts.update(task["hosts"]["db"].get("ansible_facts", {}))
    return result.returncode, report, facts


def network_lines(block: str) -> list[list[str]]:
    return [line.split() for line in block.splitlines() if line and not line.startswith("#")]


def expected_line(host: str, address: str) -> list[str]:
    prefix = 128 if ipaddress.ip_address(address).version == 6 else 32
    return ["host", DB_NAME, DB_USER, f"{address}/{prefix}", "scram-sha-256", "#", host]


@pytest.fixture(scope="module")
def rendered_facts(tmp_path_factory) -> dict:
    code, report, facts = render(tmp_path_factory.mktemp("all"), inventory(WORKERS, FALLBACK))
    assert code == 0, json.dumps(report)[-3000:]
    return facts


@pytest.fixture(scope="module")
def rendered(rendered_facts) -> str:
    return rendered_facts["pg_hba_test_block"]


@pytest.fixture(scope="module")
def rendered_without_lo6(tmp_path_factory) -> str:
    workers = {host: address for host, address in WORKERS.items() if host != "lo6"}
    code, report, facts = render(tmp_path_factory.mktemp("gone"), inventory(workers, FALLBACK))
    assert code == 0, json.dumps(report)[-3000:]
    return facts["pg_hba_test_block"]


@pytest.fixture(scope="module")
def server() -> Iterator[ThrowawayPostgres]:
    """Its own server (the session one keeps its pg_hba.conf), listening on ::1 as well."""
    with ThrowawayPostgres() as pg:
        pg.psql("ALTER SYSTEM SET listen_addresses = '127.0.0.1,::1'", db="postgres")
        pg.restart()
        yield pg


def hba_rules(pg: ThrowawayPostgres, lines: list[str]) -> list[dict]:
    """pg_hba_file_rules for a pg_hba.conf of these lines (the view parses the file as it is)."""
    pg.write_hba(lines)
    rows = pg.psql(
        "SELECT coalesce(json_agg(json_build_object('type', type, 'database', database, "
        "'user', user_name, 'address', address, 'netmask', netmask, 'method', auth_method, "
        "'error', error) ORDER BY line_number), '[]') FROM pg_hba_file_rules "
        "WHERE type IS DISTINCT FROM 'local'", db="postgres")
    return json.loads(rows)


def login(pg: ThrowawayPostgres, host: str) -> str:
    with psycopg.connect(host=host, port=pg.port, dbname=DB_NAME, user=DB_USER,
                         password=pg.password, connect_timeout=10) as conn:
        return str(conn.execute("SELECT inet_client_addr()").fetchone()[0])


def test_exactly_one_line_per_worker_host_128_for_ipv6_32_for_ipv4(rendered):
    workers = dict(WORKERS, **{FALLBACK[0]: FALLBACK[1]})
    assert network_lines(rendered) == [expected_line(host, workers[host])
                                       for host in sorted(workers)]
    ipv6 = [line for line in network_lines(rendered) if ":" in line[3]]
    assert len(ipv6) == 8 and all(line[3].endswith("/128") for line in ipv6)
    assert ["host", DB_NAME, DB_USER, "192.168.0.43/32", "scram-sha-256", "#", "ai4"] \
        in network_lines(rendered)


def test_listen_addresses_take_an_ipv6_lan_address(rendered_facts):
    assert "\nlisten_addresses = '127.0.0.1,::1,fd00::40'\n" in rendered_facts["pg_hba_test_conf"]


def test_postgresql_reads_each_line_as_a_single_host_rule(rendered, server):
    rules = hba_rules(server, rendered.splitlines())
    workers = dict(WORKERS, **{FALLBACK[0]: FALLBACK[1]})
    assert [rule["error"] for rule in rules] == [None] * len(workers)
    got = {(ipaddress.ip_address(rule["address"]), rule["netmask"]) for rule in rules}
    want = set()
    for address in workers.values():
        parsed = ipaddress.ip_address(address)
        want.add((parsed, ALL_ONES_V6 if parsed.version == 6 else "255.255.255.255"))
    assert got == want
    assert {(rule["type"], tuple(rule["database"]), tuple(rule["user"]), rule["method"])
            for rule in rules} == {("host", (DB_NAME,), (DB_USER,), "scram-sha-256")}


def test_ipv6_line_admits_its_host_and_nothing_else(rendered, server):
    server.write_hba(rendered.splitlines())
    server.reload()
    assert login(server, "::1") == "::1"
    # ::1/128 is not IPv4 loopback: no line for 127.0.0.1, so that login is refused.
    with pytest.raises(psycopg.OperationalError, match=re.escape(
            'no pg_hba.conf entry for host "127.0.0.1"')):
        login(server, "127.0.0.1")


def test_a_host_leaving_the_worker_groups_loses_its_line(rendered_without_lo6, server):
    assert not any(line[-1] == "lo6" or line[3].startswith("::1/")
                   for line in network_lines(rendered_without_lo6))
    server.write_hba(rendered_without_lo6.splitlines())
    server.reload()
    with pytest.raises(psycopg.OperationalError, match=re.escape(
            'no pg_hba.conf entry for host "::1"')):
        login(server, "::1")


def test_malformed_addresses_stop_the_preflight_with_a_clear_message(tmp_path):
    good = {"mac6": "fd00::43", "ai4": "192.168.0.43"}
    code, report, facts = render(tmp_path, inventory({**good, **MALFORMED}))
    assert code != 0
    tasks = {task["task"]["name"]: task["hosts"]["db"] for task in report["plays"][0]["tasks"]}
    results = {result["item"]: result for result in tasks[PREFLIGHT]["results"]}
    assert sorted(results) == sorted({**good, **MALFORMED})
    for host in good:
        assert not results[host].get("failed"), results[host]
    for host, address in MALFORMED.items():
        assert results[host].get("failed"), f"{host} {address!r} passed the preflight"
        assert results[host]["msg"].startswith(
            f"Worker host {host} has no IP address: '{address}' is not an IPv4/IPv6 address. "
            f"Set node_address (e.g. node_address: 192.168.0.43, or fd00::43"), results[host]["msg"]
    # The play stopped in preflight: no pg_hba.conf line was even rendered.
    assert "pg_hba_test_block" not in facts


def test_postgresql_refuses_or_misreads_the_lines_the_preflight_refuses(server):
    # The line the template would have written for each malformed one-line address.
    addresses = [address for address in MALFORMED.values()
                 if address and address.strip() == address]
    lines = [f"host {DB_NAME} {DB_USER} {address}/{128 if ':' in address else 32} scram-sha-256"
             for address in addresses]
    rules = hba_rules(server, lines)
    assert len(rules) == len(lines)
    accepted = {address: rule["address"] for address, rule in zip(addresses, rules, strict=True)
                if not rule["error"]}
    # PostgreSQL takes an abbreviated IPv4 address for another host; it refuses all the rest
    # (on a restart, a refused line keeps PostgreSQL from starting at all).
    assert accepted == {"192.168.0": "192.168.0.0"}


def test_each_coordinator_on_another_host_gets_one_line_for_the_coordinator_login(tmp_path):
    inv = inventory({"ai4": WORKERS["ai4"], "mac6": WORKERS["mac6"]})
    # The database host's own Coordinator (over loopback), a second one on its own host, and
    # a worker host that runs one too, whose worker line already admits the same login.
    inv["all"]["hosts"]["core2"] = {"node_address": "fd00::41"}
    inv["all"]["children"]["coordinator"] = {"hosts": {"db": None, "core2": None, "ai4": None}}
    code, report, facts = render(tmp_path, inv)
    assert code == 0, json.dumps(report)[-3000:]
    lines = network_lines(facts["pg_hba_test_block"])
    assert sorted(lines) == sorted([expected_line("ai4", WORKERS["ai4"]),
                                    expected_line("mac6", WORKERS["mac6"]),
                                    [*expected_line("core2", "fd00::41"), "(Coordinator)"]])
