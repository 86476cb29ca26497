"""The Coordinator service: task API, PostgreSQL task record, Redis queues, Reaper.

Started with ``python -m coordinator`` from ``files/``; configured only from the environment
(see ``coordinator.config`` and docs/coordinator.md).
"""

import socket

__version__ = "0.1.0"
#: Which instance answers: the host's name. Several instances may serve one cluster (over one
#: database and one Redis); /health and the status page say which one a client reached.
INSTANCE = socket.gethostname()
