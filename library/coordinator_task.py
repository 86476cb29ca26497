#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: route one task through the Coordinator and confirm it in PostgreSQL."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: coordinator_task
short_description: Route a task through the Coordinator and confirm in PostgreSQL that it is done
description:
  - Sends one task to the Coordinator API (C(POST /route)), then reads that task's row in the
    C(tasks) table of PostgreSQL itself, every O(poll_interval) seconds, until it is C(done)
    or C(failed) or O(timeout) runs out.
  - It is the acceptance step of a worker migration. A running service proves nothing, and
    nothing re-dispatches web-search tasks, so the proof is one routed task seen C(done) in
    the database, on the expected host (O(worker_host)), claimed by that host's own database
    login (O(claimed_by_host)), without a fallback answer unless O(allow_fallback) says one is
    acceptable.
  - The database is read directly, not through the API, so a Coordinator that answers while
    writing to another database, or a worker whose writes never reach PostgreSQL, is caught.
  - PostgreSQL is checked (login and the C(tasks) table) B(before) the task is routed, so a
    refused login or a wrong database leaves no orphan task behind.
  - >-
    Fails with one line that says what was seen, for example:
    V(task <id> still 'queued' after 60s: no web worker took it);
    V(task <id> still 'running' after 60s on web-worker-macbookair (macbookair\));
    V(task <id> done on ai-core, expected macbookair);
    V(task <id> is done, and the row claims host macbookair but was claimed by login
    worker_ai_core, not macbookair's own worker_macbookair: ...);
    V(task <id> done with fallback on macbookair: No search results: SearXNG's engines did
    not answer: google (timeout\)) (the first line of a fallback answer, where the worker
    says why: summarisation failed, or SearXNG's engines did not answer; cut short);
    V(task <id> failed on macbookair: <error>).
  - Routing a task inserts a row, but the module is a verification probe and, like
    M(community.postgresql.postgresql_ping), always reports C(changed=false), so a re-run of
    the migration playbook reports C(changed=0) while still verifying the cluster.
version_added: "0.1.0"
author:
  - Coordinator cluster contributors (@coordinator-cluster)
options:
  prompt:
    description:
      - The prompt of the test task.
    type: str
    required: true
  task_type:
    description:
      - Type of the task. C(web_search) and C(rag) go to a shared queue; the others are
        inference tasks for one worker's queue.
    type: str
    default: web_search
    choices: [chat, generate, rag, summarize, web_search]
  model:
    description:
      - Model requested for an inference task. Unset means the worker's default.
    type: str
  target_worker:
    description:
      - Worker id an inference task is routed to (sent as C(worker) in the route request).
        Unset lets the Coordinator choose.
    type: str
  options:
    description:
      - Ollama options the task carries to the model its worker asks (sent as C(options) in
        the route request), for C(web_search) and the inference types; C(temperature) 0,
        C(seed) 42 and C(num_predict) 64, for example, give greedy answers of at most 64
        tokens that repeat. The Coordinator takes C(num_predict), C(seed), C(temperature), C(top_k),
        C(top_p), C(min_p), C(repeat_penalty) and C(stop), and names any other it refuses.
      - Unset leaves Ollama's defaults (the web worker still caps its summary at its
        C(SUMMARY_MAX_TOKENS)).
    type: dict
  worker_host:
    description:
      - Host expected to have done the work, compared (case-insensitively) with the
        C(worker_host) column of the finished task. Use the worker's C(WORKER_HOST).
      - Unset accepts any host.
      - The worker writes this column itself; O(claimed_by_host) checks what the database
        established.
    type: str
  claimed_by_host:
    description:
      - Inventory name of the host expected to have done the work. The finished task's
        C(claimed_by), which the database sets to the login that claimed it, must be that
        host's own login (C(worker_<host>), coordinator_contract C(worker_db_role)); the row's
        C(worker_host) and C(worker_id) are what the worker wrote, and a host may claim only
        its own workers' tasks, naming only its own workers (the schema's guard and the
        grants of the C(postgresql_access) role).
      - When the task was claimed by a login that is no worker host's own (without
        C(postgresql_access_worker_password_key) every worker host logs in as the
        Coordinator's login), the database cannot tell hosts apart; the module then warns
        that the host rests on the worker's own word instead of failing.
      - Unset checks no login.
    type: str
    version_added: "0.3.0"
  allow_fallback:
    description:
      - Whether a fallback answer is acceptable (the raw search results because summarisation
        failed on the worker, or why there are none because SearXNG's engines did not answer).
        By default such an answer fails the task, quoting the worker's reason.
    type: bool
    default: false
  answered_model:
    description:
      - Model that must have written the answer (the C(answered_model) column the worker
        fills in), compared case-insensitively. A fallback answer has none.
      - Unset accepts any.
    type: str
    version_added: "0.2.0"
  timeout:
    description:
      - Seconds to wait for the task to reach C(done) or C(failed), counted from routing.
      - Also the time limit of the route request itself. Within it, a Coordinator that
        refuses the connection or answers 503 (restarting, or PostgreSQL restarting) is asked
        again every second, and a PostgreSQL connection lost while waiting is made again.
    type: int
    default: 60
  poll_interval:
    description:
      - Seconds between two reads of the task's row.
    type: float
    default: 1.0
  pg_dsn:
    description:
      - libpq connection string or URI of the Coordinator's database, as in the Coordinator's
        and workers' C(PG_DSN).
      - Mutually exclusive with the C(login_*) options.
    type: str
  login_host:
    description:
      - Host running the Coordinator's PostgreSQL.
      - Empty means libpq's default Unix socket.
    type: str
    default: ''
  login_unix_socket:
    description:
      - Directory of the Unix domain socket for local connections; wins over O(login_host).
    type: str
    default: ''
  login_port:
    description:
      - PostgreSQL port.
    type: int
    default: 5432
  login_user:
    description:
      - PostgreSQL role to read the C(tasks) table as.
    type: str
    default: coordinator
  login_password:
    description:
      - Password of O(login_user).
    type: str
    default: ''
  login_db:
    description:
      - Database holding the C(tasks) table.
    type: str
    default: coordinator
  ssl_mode:
    description:
      - libpq C(sslmode) of the PostgreSQL connection.
    type: str
    default: prefer
    choices: [allow, disable, prefer, require, verify-ca, verify-full]
  ca_cert:
    description:
      - CA certificate file that the server's certificate must come from (libpq
        C(sslrootcert)); with O(ssl_mode=verify-full), the cluster CA's C(ca.crt) (see
        C(docs/tls.md)).
      - Empty means libpq's default, C(~/.postgresql/root.crt).
    type: str
    default: ''
    aliases: [ssl_rootcert]
  connect_timeout:
    description:
      - Seconds to wait for the PostgreSQL connection.
    type: int
    default: 10
attributes:
  check_mode:
    support: full
    details: In check mode the options and PostgreSQL (the login, the C(tasks) table) are
      checked as a run checks them before routing; nothing is routed, and RV(msg) says what
      a run would route and require.
  diff_mode:
    support: none
notes:
  - Needs C(psycopg2) or, failing that, C(psycopg) (3) importable by the Python that runs the
    module on the target host. The PostgreSQL role installs C(python3-psycopg2) on the
    database host, which is why that host is a good place to run this module.
  - The PostgreSQL server must accept the login from the host that runs the module; a refused
    login names the user and host, and says when a C(pg_hba.conf) line is missing.
requirements:
  - psycopg2 or psycopg >= 3
seealso:
  - module: community.postgresql.postgresql_ping
  - name: libpq connection strings
    description: The syntax of O(pg_dsn).
    link: https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING
extends_documentation_fragment:
  - coordinator_api
  - module_attributes
"""

EXAMPLES = r"""
- name: Prove the migrated web worker answers, in the database itself
  coordinator_task:
    coordinator_url: https://ai-core.lan:8000
    coordinator_token: "{{ coordinator_token }}"
    ca_path: /etc/coordinator-cluster/tls/ca.crt
    login_host: ai-core.lan
    login_password: "{{ coordinator_db_password }}"
    prompt: What is the weather in Tokyo today?
    worker_host: macbookair
    claimed_by_host: macbookair
    timeout: 60
  register: probe

- name: Show where and how fast it ran
  ansible.builtin.debug:
    msg: "{{ probe.task_id }} done on {{ probe.worker_host }} in {{ probe.seconds }}s"

- name: Same probe with the workers' PG_DSN, run on the database host, fallback accepted
  coordinator_task:
    coordinator_url: http://127.0.0.1:8000
    pg_dsn: "{{ worker_pg_dsn }}"
    prompt: What is the weather in Tokyo today?
    allow_fallback: true
  delegate_to: ai-core

- name: Check an inference worker through its own queue
  coordinator_task:
    coordinator_url: http://ai-core.lan:8000
    login_host: ai-core.lan
    login_password: "{{ coordinator_db_password }}"
    task_type: generate
    target_worker: macbookair
    prompt: Say hello in one word.
    # Greedy and short: the same answer, as long, every time.
    options:
      temperature: 0
      seed: 42
      num_predict: 16
    worker_host: macbookair
    timeout: 120
    poll_interval: 2
"""

RETURN = r"""
msg:
  description: One line saying what was seen; in check mode, what a run would route and require.
  returned: always
  type: str
  sample: >-
    task 2f0c1d9e-8a4b-4c55-9d1e-6b7f3a2c9e10 done on web-worker-macbookair (macbookair) in 4.1s
task_id:
  description: Id of the routed task (C(tasks.id)).
  returned: when a task was routed
  type: str
  sample: 2f0c1d9e-8a4b-4c55-9d1e-6b7f3a2c9e10
task_type:
  description: Type of the task as stored.
  returned: when the task's row was read
  type: str
  sample: web_search
status:
  description: Last status read from PostgreSQL (C(done) on success).
  returned: when the task's row was read
  type: str
  sample: done
queue:
  description: Redis queue the task was last pushed to.
  returned: when the task's row was read
  type: str
  sample: tasks:web
worker:
  description: The C(worker) column; C(web-worker) for every web-search result, whatever the host.
  returned: when the task's row was read
  type: str
  sample: web-worker
worker_id:
  description: Id of the worker that claimed the task.
  returned: when the task's row was read
  type: str
  sample: web-worker-macbookair
worker_host:
  description: Host of the worker that claimed the task.
  returned: when the task's row was read
  type: str
  sample: macbookair
fallback:
  description: >-
    Whether the answer is a fallback, not the model's: the raw search results because
    summarisation failed, or why there are none because SearXNG's engines did not answer.
  returned: when the task's row was read
  type: bool
  sample: false
answered_model:
  description: The model whose answer is the result; null for a failure or a fallback answer.
  returned: when the task's row was read
  type: str
  sample: hf.co/LiquidAI/LFM2.5-1.2B-JP-GGUF:Q4_K_M
claimed_by:
  description:
    - The database login that claimed the task (C(tasks.claimed_by)), set by the database,
      not by the worker; a worker host's own login C(worker_<host>), or the Coordinator's
      login when the workers share it.
  returned: when the task's row was read
  type: str
  sample: worker_macbookair
answer:
  description: The task's result.
  returned: when the task's row was read
  type: str
  sample: Tokyo is sunny today, 14 degrees.
error:
  description: Why the task failed, as the worker or the Reaper wrote it.
  returned: when the task's row was read
  type: str
  sample: null
seconds:
  description: Seconds from C(created_at) to C(finished_at), from the table's own clock.
  returned: when the task's row was read
  type: float
  sample: 4.113
start_delay_seconds:
  description: Seconds from C(created_at) to C(started_at), how long the task waited for a worker.
  returned: when the task's row was read
  type: float
  sample: 0.012
created_at:
  description: C(created_at) of the task, ISO 8601.
  returned: when the task's row was read
  type: str
  sample: "2026-11-30T03:12:01.123456+00:00"
started_at:
  description: C(started_at) of the task, ISO 8601, null while queued.
  returned: when the task's row was read
  type: str
  sample: "2026-11-30T03:12:01.135456+00:00"
finished_at:
  description: C(finished_at) of the task, ISO 8601, null until done or failed.
  returned: when the task's row was read
  type: str
  sample: "2026-11-30T03:12:05.236456+00:00"
"""

import contextlib
import sys
import time
from typing import Any
from urllib.error import HTTPError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.coordinator_api import (
    Unanswered,
    api_argument_spec,
    coordinator_urls,
    open_first,
    urls_problem,
)
from ansible.module_utils.coordinator_contract import TASK_TYPES
from ansible.module_utils.coordinator_pg import NO_DRIVER_MESSAGE, Driver, load_driver
from ansible.module_utils.coordinator_probe import (
    Expectation,
    ProbeError,
    TaskRow,
    build_conninfo,
    build_route_request,
    check_options,
    describe_http_error,
    describe_missing_table,
    describe_pg_connect_error,
    describe_plan,
    describe_row_not_found,
    describe_success,
    describe_target,
    describe_timeout,
    describe_unanswered,
    first_line,
    identity_warning,
    is_final,
    is_restarting,
    judge_final,
    parse_route_answer,
    result_fields,
    row_from_tuple,
    task_query,
)
from ansible.module_utils.coordinator_sql import SQL

APPLICATION_NAME = "coordinator_task probe"
# Seconds between two route attempts while the Coordinator restarts (connection refused, 503).
ROUTE_RETRY_DELAY = 1.0
LOGIN_OPTIONS = (
    "login_host", "login_unix_socket", "login_port", "login_user", "login_password", "login_db",
    "ca_cert",
)


def argument_spec() -> dict[str, Any]:
    return {
        **api_argument_spec(),
        "prompt": {"type": "str", "required": True},
        "task_type": {
            "type": "str",
            "default": "web_search",
            "choices": list(TASK_TYPES),
        },
        "model": {"type": "str"},
        "target_worker": {"type": "str"},
        "options": {"type": "dict"},
        "worker_host": {"type": "str"},
        "claimed_by_host": {"type": "str"},
        "allow_fallback": {"type": "bool", "default": False},
        "answered_model": {"type": "str"},
        "timeout": {"type": "int", "default": 60},
        "poll_interval": {"type": "float", "default": 1.0},
        "pg_dsn": {"type": "str", "no_log": True},
        "login_host": {"type": "str", "default": ""},
        "login_unix_socket": {"type": "str", "default": ""},
        "login_port": {"type": "int", "default": 5432},
        "login_user": {"type": "str", "default": "coordinator"},
        "login_password": {"type": "str", "default": "", "no_log": True},
        "login_db": {"type": "str", "default": "coordinator"},
        "ssl_mode": {
            "type": "str",
            "default": "prefer",
            "choices": ["allow", "disable", "prefer", "require", "verify-ca", "verify-full"],
        },
        "ca_cert": {"type": "str", "default": "", "aliases": ["ssl_rootcert"]},
        "connect_timeout": {"type": "int", "default": 10},
    }


class Probe:
    """The I/O around coordinator_probe's pure functions: one connection, one route, polls."""

    def __init__(self, module: AnsibleModule, driver: Driver) -> None:
        self.module = module
        self.driver = driver
        params = module.params
        self.conninfo = build_conninfo(
            pg_dsn=params["pg_dsn"],
            login_host=params["login_host"],
            login_unix_socket=params["login_unix_socket"],
            login_port=params["login_port"],
            login_user=params["login_user"],
            login_password=params["login_password"],
            login_db=params["login_db"],
            ssl_mode=params["ssl_mode"],
            ca_cert=params["ca_cert"],
        )
        try:
            self.target = describe_target(driver.parse(self.conninfo))
        except driver.error as exc:
            # The parser's message can quote the string, password included: never show it.
            raise ProbeError(
                "pg_dsn is not a valid libpq connection string or URI; check its syntax"
            ) from exc
        self.conn: Any = None

    def connect(self) -> None:
        try:
            self.conn = self.driver.connect(
                self.conninfo, self.module.params["connect_timeout"], APPLICATION_NAME
            )
        except self.driver.error as exc:
            raise ProbeError(describe_pg_connect_error(self.target, str(exc))) from exc
        try:
            self._execute(SQL.PROBE_TABLE)
        except self.driver.error as exc:
            raise ProbeError(describe_missing_table(self.target, str(exc))) from exc

    def route(self) -> str:
        params = self.module.params
        urls = coordinator_urls(params)
        request = build_route_request(
            coordinator_url=urls[0],
            coordinator_token=params["coordinator_token"],
            prompt=params["prompt"],
            task_type=params["task_type"],
            model=params["model"],
            target_worker=params["target_worker"],
            options=params["options"],
        )
        deadline = time.monotonic() + params["timeout"]
        while True:
            url = urls[0]
            try:
                url, answer = open_first(
                    urls,
                    request.url.removeprefix(urls[0]),
                    data=request.body,
                    headers=request.headers,
                    method="POST",
                    timeout=params["timeout"],
                    validate_certs=params["validate_certs"],
                    ca_path=params["ca_path"] or None,
                )
                return parse_route_answer(url, answer.read())
            except HTTPError as exc:
                failure = ProbeError(describe_http_error(
                    exc.coordinator_url, exc.code, exc.read(), bool(params["coordinator_token"])))
                retry = is_restarting(exc.code)
            except Unanswered as exc:
                failure = ProbeError(describe_unanswered(exc.failures, params["ca_path"] or None))
                retry = exc.restarting()
            except OSError as exc:  # the answer cut short while it was read
                failure = ProbeError(describe_unanswered([(url, exc)], params["ca_path"] or None))
                retry = False
            if not retry or time.monotonic() + ROUTE_RETRY_DELAY > deadline:
                raise failure
            time.sleep(ROUTE_RETRY_DELAY)

    def read(self, task_id: str, deadline: float) -> TaskRow:
        """The task's row; a lost connection (PostgreSQL restarting) is made again until
        ``deadline``."""
        while True:
            try:
                if self.conn is None:
                    self.conn = self.driver.connect(
                        self.conninfo, self.module.params["connect_timeout"], APPLICATION_NAME)
                values = self._execute(SQL.PROBE_TASK, task_query(task_id))
                break
            except self.driver.error as exc:
                self.close()
                if time.monotonic() + self.module.params["poll_interval"] > deadline:
                    raise ProbeError(
                        f"lost PostgreSQL ({self.target}) while waiting for task {task_id}: "
                        f"{first_line(str(exc))}",
                        {"task_id": task_id},
                    ) from exc
                time.sleep(self.module.params["poll_interval"])
        # The Coordinator commits the row before it answers 201: absent means the probe reads
        # another database, and waiting out the timeout would only hide that.
        if values is None:
            raise ProbeError(describe_row_not_found(task_id, self.target), {"task_id": task_id})
        return row_from_tuple(values)

    def _execute(self, sql: str, args: dict[str, str] | None = None) -> tuple[Any, ...] | None:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchone()

    def wait(self, task_id: str, started: float) -> TaskRow:
        """Poll the row until final; the deadline counts from routing, not from the first read."""
        params = self.module.params
        deadline = started + params["timeout"]
        row = self.read(task_id, deadline)
        while not is_final(row):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProbeError(describe_timeout(row, params["timeout"]), result_fields(row))
            time.sleep(min(params["poll_interval"], remaining))
            row = self.read(task_id, deadline)
        return row

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(self.driver.error):
                self.conn.close()
            self.conn = None


def expectation(params: dict[str, Any]) -> Expectation:
    return Expectation(params["worker_host"], params["allow_fallback"],
                       params["answered_model"], params["claimed_by_host"])


def run(module: AnsibleModule, driver: Driver) -> dict[str, Any]:
    probe = Probe(module, driver)
    try:
        probe.connect()
        if module.check_mode:
            params = module.params
            return {"changed": False, "msg": describe_plan(
                ", ".join(coordinator_urls(params)), params["task_type"],
                params["target_worker"], params["timeout"], expectation(params), probe.target)}
        started = time.monotonic()
        row = probe.wait(probe.route(), started)
    finally:
        probe.close()
    expect = expectation(module.params)
    failure = judge_final(row, expect)
    if failure:
        raise ProbeError(failure, result_fields(row))
    warning = identity_warning(row, expect)
    if warning:
        module.warn(warning)
    return {"changed": False, "msg": describe_success(row), **result_fields(row)}


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[("pg_dsn", option) for option in LOGIN_OPTIONS],
        supports_check_mode=True,
    )
    params = module.params
    bad_option = urls_problem(params) or next(
        (problem for problem in (check_options(url, params["timeout"], params["poll_interval"])
                                 for url in coordinator_urls(params)) if problem), None)
    if bad_option:
        module.fail_json(msg=bad_option)
    driver = load_driver()
    if driver is None:
        module.fail_json(msg=NO_DRIVER_MESSAGE.format(python=sys.executable))
    try:
        result = run(module, driver)
    except ProbeError as exc:
        module.fail_json(msg=str(exc), changed=False, **exc.fields)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
