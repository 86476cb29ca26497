"""lab/demo.py reads migrate-web.yml's summary from the playbook's output (YAML results)."""

from __future__ import annotations

import re
from pathlib import Path

from lab import demo

REPO = Path(__file__).resolve().parents[2]

# What the default callback with callback_result_format=yaml prints for the summary task:
# long items folded over two lines, Japanese kept as is.
LOG = """\
TASK [11. Summary] **************************************************************
ok: [lab-ai-core] =>
    msg:
    - 'task 08371cfa-cb14-4a36-ae52-d152702fb81d: done in 0.312 s, processed by 10.89.20.43
        (web-worker-lab-worker-fast), fallback False'
    - 'before: lab-worker-slow'
    - 'after: lab-worker-fast'
    - 'registry: the Coordinator''s registry lists 1 alive web worker serving tasks:web:
        web-worker-lab-worker-fast on lab-worker-fast (10.89.20.43), pid 812, v2.1, heartbeat
        0.3 s ago'
    - 'answer: 要約: 「今日の東京の天気は？」に関する内容です。'

PLAY [Remove the old web worker's files] ***************************************
"""


def test_summary_lines_are_unfolded() -> None:
    assert demo.migration_summary(LOG) == [
        "task 08371cfa-cb14-4a36-ae52-d152702fb81d: done in 0.312 s, processed by 10.89.20.43 "
        "(web-worker-lab-worker-fast), fallback False",
        "before: lab-worker-slow",
        "after: lab-worker-fast",
        "registry: the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        "web-worker-lab-worker-fast on lab-worker-fast (10.89.20.43), pid 812, v2.1, heartbeat "
        "0.3 s ago",
        "answer: 要約: 「今日の東京の天気は？」に関する内容です。",
    ]


def test_a_missing_summary_is_said_not_invented() -> None:
    assert demo.migration_summary("PLAY RECAP ***\n") == [
        "(no summary in the log: task '11. Summary' did not run)"]


def test_the_summary_task_name_matches_the_playbook() -> None:
    playbook = (REPO / "migrate-web.yml").read_text()
    assert re.search(rf'- name: "{re.escape(demo.SUMMARY_TASK)}"', playbook)
