#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: A role's checks of its inputs, in order, in one task
description:
  - Evaluates each check's conditions on the controller, in order, and fails with the message
    of the first check that does not hold, as a run of M(ansible.builtin.assert) tasks would,
    one task per check. One task instead of one per check, as each task costs the controller
    a worker process per host (the roles' 30 checks as tasks took about a tenth of a no-op
    C(site.yml) of three hosts).
  - A check's message is templated only when that check fails, so it may use what only a
    failing case defines.
  - A message names variables, never a secret's value; the result holds the message and the
    condition that failed, never the values it compared, so a task of this module needs no
    C(no_log) and a user reads the message.
  - Runs on the controller only (an action plugin); nothing reaches the host.
version_added: "0.9.0"
options:
  checks:
    description: The checks, evaluated in this order.
    type: list
    elements: dict
    required: true
    suboptions:
      that:
        description:
          - A condition or a list of conditions, each as in a task's C(when) (no C({{ }})).
            The check holds when all of them are true.
        type: list
        elements: str
        required: true
      when:
        description:
          - A condition or a list of conditions; when one is false the check is skipped.
        type: list
        elements: str
        default: []
      msg:
        description: What the user reads when the check fails (a template).
        type: str
        required: true
author:
  - Coordinator cluster contributors (@coordinator-cluster)
attributes:
  check_mode:
    support: full
    details: Evaluates on the controller and changes nothing, in check mode as in a run.
  diff_mode:
    support: none
seealso:
  - module: ansible.builtin.assert
extends_documentation_fragment:
  - module_attributes
"""

EXAMPLES = r"""
- name: Preflight | the role's inputs
  preflight:
    checks:
      - that: redis_password | length >= 16
        msg: redis_password is empty or shorter than 16 characters.
      - that: redis_tls_ca_file | length > 0
        when: redis_tls_cert_file | length > 0
        msg: "redis_tls_cert_file is {{ redis_tls_cert_file }}: set redis_tls_ca_file too."
"""

RETURN = r"""
msg:
  description: The failing check's message, or how many checks held.
  returned: always
  type: str
  sample: 6 checks held
assertion:
  description: The condition that was false.
  returned: failed
  type: str
  sample: redis_password | length >= 16
checked:
  description: How many checks were evaluated (not skipped by their C(when)).
  returned: always
  type: int
  sample: 6
"""
