# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the check_mode and diff_mode attributes of every module of library/ mean; each module
says how far it supports them (support, details)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Can run in check mode and report what it would change without changing it.
  diff_mode:
    description: Returns what it changed (or would change, in check mode) as a diff.
"""
