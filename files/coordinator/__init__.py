"""The Coordinator service: task API, PostgreSQL task record, Redis queues, Reaper.

Started with ``python -m coordinator`` from ``files/``; configured only from the environment
(see ``coordinator.config`` and docs/coordinator.md).
"""

__version__ = "0.1.0"
