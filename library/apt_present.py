#!/usr/bin/python
# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_present
short_description: Debian packages installed, apt asked only when one is missing
description:
  - Makes sure Debian packages are installed, like M(ansible.builtin.apt) with
    O(ansible.builtin.apt#module:state=present), but without a module run on the target when
    the host's package facts already list every one of them.
  - The first time in a run it lists the host's packages with one C(dpkg-query) over the
    connection (no module run, no privileges) and returns them as the fact
    C(ansible_facts.packages), in the shape M(ansible.builtin.package_facts) gives, which later
    tasks, this module's among them, read for free. On a host where several roles each need a
    few packages, that one read replaces an M(ansible.builtin.apt) run per task once everything
    is installed.
  - When a package is missing it runs M(ansible.builtin.apt) for the missing ones, then reads
    the packages again, so the fact stays true for the tasks after it.
  - A package counts as installed when dpkg says it is installed and configured; one removed
    with its configuration kept, unpacked or half-configured is given to M(ansible.builtin.apt).
  - A name with a version, a release or an architecture (C(=), C(<), C(>), C(:), C(/), C(*))
    cannot be checked against the facts; M(ansible.builtin.apt) is always asked about it.
  - This module is the action plugin of the same name; it runs on the controller, runs
    C(dpkg-query) and M(ansible.builtin.apt) on the target.
version_added: "0.2.0"
options:
  name:
    description:
      - The packages that must be installed.
    type: list
    elements: str
    required: true
  install_recommends:
    description:
      - Whether to install the recommended packages of the missing ones too
        (M(ansible.builtin.apt)'s O(ansible.builtin.apt#module:install_recommends)). Not set,
        the target's apt configuration decides (Debian's says yes).
    type: bool
  update_cache:
    description:
      - Refresh the package lists before installing a missing package, when they are older
        than O(cache_valid_time).
    type: bool
    default: true
  cache_valid_time:
    description:
      - Seconds the package lists stay fresh (M(ansible.builtin.apt)'s
        O(ansible.builtin.apt#module:cache_valid_time)). Used only when a package is missing.
    type: int
    default: 3600
author:
  - Coordinator cluster contributors (@coordinator-cluster)
attributes:
  check_mode:
    support: full
    details: Reports the packages that would be installed; nothing is installed.
  diff_mode:
    support: none
  facts:
    description: Returns the host's packages as the fact C(ansible_facts.packages).
    support: full
notes:
  - Debian and its derivatives only; the target needs python3-apt, as M(ansible.builtin.apt)
    does (it installs it if missing).
  - Packages are never removed or upgraded.
seealso:
  - module: ansible.builtin.apt
  - module: ansible.builtin.package_facts
extends_documentation_fragment:
  - module_attributes
"""

EXAMPLES = r"""
- name: Install Redis
  apt_present:
    name:
      - redis-server
    cache_valid_time: 3600

- name: Install what a virtualenv needs, without its recommendations
  apt_present:
    name: [python3-venv, python3-packaging]
    install_recommends: false
"""

RETURN = r"""
missing:
  description:
    - The packages that were not installed before the task (with a version, a release or an
      architecture in its name, a package is always listed here), and that
      M(ansible.builtin.apt) was asked to install. Empty when apt was not asked.
  returned: always
  type: list
  elements: str
  sample: [acl]
ansible_facts:
  description:
    - The host's installed packages as C(dpkg-query) lists them, in the shape of
      M(ansible.builtin.package_facts) (name, version, arch, source).
  returned: when the packages were read (the first time in a run, and after an install)
  type: dict
  contains:
    packages:
      description: Package name -> list of its installed versions (one per architecture).
      returned: when the packages were read
      type: dict
"""
