"""The tests, one package per part of the project (tests/<part>/), each run by ./dev test.

The rule that groups them: a package is named for what it tests (the Coordinator, the
workers, a module, a role, the stand-ins, the lab, the migration on the lab), and holds its
own helpers: fixtures in its conftest.py, other helpers in a module of its own, imported
relatively (``from .coordkit import ...``). What several packages share is in tests/conftest.py
(the throwaway PostgreSQL and Redis servers), a tests/<what>_kit.py module (library_kit: the
modules of library/ as code and as documented), lab/ (the lab, its drivers, the throwaway
servers) or tests/doubles/ (stand-in programs such as launchctl). Slow suites, on containers:
tests/lab (every Molecule scenario, the lab script), tests/migrate (one lab for every case).
"""
