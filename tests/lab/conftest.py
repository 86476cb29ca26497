"""Fixtures of the lab tests: the environment lab commands run with."""

from __future__ import annotations

import pytest

from lab import drive


@pytest.fixture(name="lab_env", scope="module")
def lab_env_fixture() -> dict[str, str]:
    """Environment for podman and molecule: the lab's containers.conf, the venv first on PATH."""
    return drive.env()
