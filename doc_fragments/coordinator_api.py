# Copyright: (c) 2026, the coordinator-cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of the modules that call the Coordinator API (coordinator_drain,
coordinator_task, coordinator_workers); module_utils/coordinator_api.api_argument_spec is
their argument spec."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  coordinator_url:
    description:
      - Base URL of the Coordinator API, without a path such as C(/route).
      - Or the cluster's Coordinators (instances over one database), a list or
        comma-separated, asked in that order. A request goes to the first that answers (an
        error status is an answer); one refused, timed out or failing TLS is passed over.
        When none answers, the error names each URL and why.
    type: list
    elements: str
    required: true
  coordinator_token:
    description:
      - Bearer token of the Coordinator, the operator's (its C(COORDINATOR_TOKEN)).
      - Leave unset when the Coordinator runs without a token.
    type: str
  validate_certs:
    description:
      - Verify the Coordinator's TLS certificate when O(coordinator_url) is C(https).
    type: bool
    default: true
  ca_path:
    description:
      - PEM file of the CA the Coordinator's certificate is verified against (the cluster
        CA's C(ca.crt), which the cluster_tls role puts on every host), instead of the
        system's CA store.
      - With it set, an C(http) O(coordinator_url) fails before anything is sent, since
        only an HTTPS Coordinator has a certificate to verify.
    type: path
notes:
  - The Coordinator API is called with Ansible's own C(open_url), so no Python package is
    needed for it on the host that runs the module.
"""
