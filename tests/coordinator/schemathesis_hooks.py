"""Schemathesis hooks for tests/coordinator/test_schemathesis.py (SCHEMATHESIS_HOOKS).

GET /task/{id}?wait=N long-polls for up to 60 s, as documented; generated waits that long
would spend the run's budget sleeping, so a numeric wait is cut to a tenth of a second. Any
other value (a negative test's string, say) goes as generated.
"""

from __future__ import annotations

import schemathesis

LONGEST_WAIT = 0.1


@schemathesis.hook
def map_query(ctx, query):
    wait = (query or {}).get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > LONGEST_WAIT:
        query["wait"] = LONGEST_WAIT
    return query
