#!/usr/bin/python
"""Test-only module: returns the facts it is given, so a play can pose as another OS."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    # It only reads its arguments: a --check play poses as the same OS.
    module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}},
                           supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts=module.params["facts"])


if __name__ == "__main__":
    main()
