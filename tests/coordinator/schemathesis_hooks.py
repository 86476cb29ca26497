"""Schemathesis hooks for tests/coordinator/test_schemathesis.py (SCHEMATHESIS_HOOKS).

GET /task/{id}?wait=N long-polls for up to 60 s, as documented; generated waits that long
would spend the run's budget sleeping, or outlast schemathesis' 10 s read timeout when the id
is a real task's (schemathesis reuses the ids the API answered with, GET /tasks' too). So a
wait the schema allows (a number, or in the coverage phase its text) is cut to a tenth of a
second just before each request, in every phase. Any other value (a negative test's -1, 61
or string) goes as generated, for the server to refuse.
"""

from __future__ import annotations

from typing import Any

import schemathesis

LONGEST_WAIT = 0.1


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _allowed(case: Any) -> tuple[float, float]:
    """The schema's bounds of ``wait``."""
    for parameter in case.operation.query:
        if parameter.name == "wait":
            schema = parameter.definition["schema"]
            return schema["minimum"], schema["maximum"]
    raise LookupError(f"{case.operation.label} has no wait parameter")


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if not case.query or "wait" not in case.query:
        return
    seconds = _seconds(case.query["wait"])
    if seconds is None or seconds <= LONGEST_WAIT:
        return
    low, high = _allowed(case)
    if low <= seconds <= high:
        wait = case.query["wait"]
        case.query["wait"] = str(LONGEST_WAIT) if isinstance(wait, str) else LONGEST_WAIT
