#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_state
short_description: Read a host's accounts, files, units, agents and local APIs in one pass
description:
  - Reads what a role compares before it decides whether a module must run at all (users as
    M(ansible.builtin.user) compares them, groups, files as M(ansible.builtin.stat) reports
    them, with type, owner, group, mode and a regular file's SHA-1, systemd units as
    M(ansible.builtin.systemd_service) shows their status, launchd agents as
    C(launchd_agent) reports them, and what a local HTTP API answers, such as Ollama's model
    list). Changes nothing.
  - The action plugin of the same name passes a short Python program over the connection (the
    standard library only, run by the interpreter the host's modules run on, as the task's
    become user), which costs a fraction of a module run, which starts Ansible's module code
    on the target. Where the program cannot run (no interpreter known yet in the run, a
    connection that cannot pass it), this module reads the same.
version_added: "0.6.0"
options:
  users:
    description: User names to read.
    type: list
    elements: str
    default: []
  groups:
    description: Group names to read.
    type: list
    elements: str
    default: []
  files:
    description:
      - Absolute paths to read (not followed when a link). A path may start with C(~), the
        home of the user the read runs as, as for a module's path option.
    type: list
    elements: str
    default: []
  units:
    description: systemd units to read, in one C(systemctl show).
    type: list
    elements: str
    default: []
  agents:
    description:
      - Labels of launchd agents of O(launchd_domain) to read (a C(launchctl print) each and
        one C(launchctl print-disabled)).
    type: list
    elements: str
    default: []
  launchd_domain:
    description:
      - The launchd domain of O(agents). Unset means the reading user's C(gui/<uid>).
      - Set, the read fails unless the domain exists, even without O(agents). A C(gui/<uid>)
        domain exists only while its user is logged in at the console, and the failure says
        so in one line, as C(launchd_agent)'s does.
    type: str
  urls:
    description:
      - HTTP URLs to C(GET) from the host, without a proxy and waiting at most 5 seconds each,
        such as a local API's C(http://127.0.0.1:11434/api/tags).
    type: list
    elements: str
    default: []
  texts:
    description:
      - Absolute paths of small text files to return whole (UTF-8, at most 64 KiB), for a
        decision made on the controller, such as whether a managed block is in place.
      - Never a file that holds a secret, since its text is in the result.
    type: list
    elements: str
    default: []
author:
  - Coordinator cluster contributors (@coordinator-cluster)
attributes:
  check_mode:
    support: full
    details: Reads only; the same in check mode.
  diff_mode:
    support: none
notes:
  - Linux (where every agent reads as null) and macOS (where every unit reads as null).
seealso:
  - module: ansible.builtin.getent
  - module: ansible.builtin.stat
extends_documentation_fragment:
  - module_attributes
"""

EXAMPLES = r"""
- name: Read the service's account and the virtualenv's stamp
  host_state:
    users: [coordinator]
    groups: [coordinator]
    files: [/opt/coordinator/venv/requirements-installed.txt]
  register: service_state

- name: Read Ollama's binary and unit
  host_state:
    files: [/usr/local/bin/ollama]
    units: [ollama.service]
  register: ollama_state

- name: Read the workers' agents, failing with one line when nobody is logged in
  host_state:
    agents: [jp.mapleharp.coordinator-web-worker]
    launchd_domain: gui/501
  register: agents_state

- name: Read the models Ollama lists
  host_state:
    urls: [http://127.0.0.1:11434/api/tags]
  register: ollama_tags

- name: Create the group only where it is missing
  ansible.builtin.group:
    name: coordinator
    system: true
  when: service_state.groups.coordinator is none
"""

RETURN = r"""
users:
  description: Each user named, or null when the host has none by that name.
  returned: always
  type: dict
  sample:
    coordinator:
      uid: 999
      group: coordinator
      home: /opt/coordinator
      shell: /usr/sbin/nologin
      groups: [ssl-cert]
groups:
  description: Each group named (its gid), or null when the host has none by that name.
  returned: always
  type: dict
  sample:
    coordinator:
      gid: 999
files:
  description:
    - Each path, or null when nothing is there or it cannot be read. C(type) is file,
      directory, link or other; C(owner) and C(group) names (their ids where the host has no
      name for them); C(mode) an octal string; C(executable) whether the connecting (or
      become) user may run it; C(checksum) the SHA-1 of a regular file, as
      M(ansible.builtin.stat) reports it.
  returned: always
  type: dict
  sample:
    /opt/coordinator/venv/requirements-installed.txt:
      type: file
      uid: 0
      gid: 0
      owner: root
      group: root
      mode: "0644"
      executable: false
      checksum: 6f1ed002ab5595859014ebf0951522d9e5f1f9a4
units:
  description:
    - Each unit's LoadState (not-found for a unit systemd does not know), ActiveState,
      SubState, UnitFileState and MainPID; null where systemd cannot answer.
  returned: always
  type: dict
  sample:
    ollama.service:
      LoadState: loaded
      ActiveState: active
      SubState: running
      UnitFileState: enabled
      MainPID: 4242
agents:
  description:
    - Each agent's C(loaded) (launchd has it), C(running), C(pid) (0 when not running) and
      C(enabled) (not in C(launchctl print-disabled)); null where there is no launchctl.
  returned: always
  type: dict
  sample:
    jp.mapleharp.coordinator-web-worker:
      loaded: true
      running: true
      pid: 812
      enabled: true
launchd_domain:
  description: The launchd domain the agents were read in; null when none was read.
  returned: always
  type: str
  sample: gui/501
urls:
  description:
    - Each URL's answer, C(status) (its HTTP status) and C(json) (its body, null when it is
      not JSON), or null when nothing answered.
  returned: always
  type: dict
  sample:
    http://127.0.0.1:11434/api/tags:
      status: 200
      json: {models: [{name: "llama3.2:3b", digest: a80c4f17acd5...}]}
texts:
  description:
    - Each path's text (a link followed), or null when it is missing, not a regular file,
      larger than 64 KiB or not UTF-8.
  returned: always
  type: dict
  sample:
    /etc/postgresql/15/main/pg_hba.conf: "local all postgres peer\n"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_state import ARGUMENT_SPEC, read_state


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    state = read_state(module.params)
    if state.get("failed"):
        module.fail_json(msg=state["msg"])
    module.exit_json(changed=False, **state)


if __name__ == "__main__":
    main()
