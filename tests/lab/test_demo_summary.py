"""lab/demo.py reads migrate-web.yml's summary fact from the playbook's output (YAML results)."""

from __future__ import annotations

import re
from pathlib import Path

from lab import demo, drive

REPO = Path(__file__).resolve().parents[2]

# What the default callback with callback_result_format=yaml prints for the fact: long
# strings folded and quoted, Japanese kept as is; a task printing another fact before it.
LOG = """\
TASK [Say what will move] *******************************************************
ok: [lab-ai-core] =>
    msg: 'now the Coordinator''s registry lists 1 alive web worker serving tasks:web'

TASK [Print the summary] ********************************************************
ok: [lab-ai-core] =>
    migrate_web_summary:
        after:
        - lab-macbookair
        answer: '要約: 「今日の東京の天気は？」に関する内容です。'
        before:
        - lab-ai-core
        check_mode: false
        fallback: false
        model: 'lab-macbookair: qwen2.5:0.5b (digest 5f7d5c2b1a0e)'
        notes:
        - 'the old web worker on lab-ai-core still held a task after 60 s of draining
            (migrate_web_drain_timeout): stopped anyway, within the bound of its stop'
        probe: 08371cfa-cb14-4a36-ae52-d152702fb81d done on 10.89.20.43 in 0.312s
        registry: 'the Coordinator''s registry lists 1 alive web worker serving tasks:web:
            web-worker-lab-macbookair on lab-macbookair (10.89.20.43), pid 812, v2.1,
            heartbeat 0.3 s ago'
        seconds: 0.312
        status: done
        task_id: 08371cfa-cb14-4a36-ae52-d152702fb81d
        worker_host: 10.89.20.43
        worker_id: web-worker-lab-macbookair

PLAY [Remove the old web worker's files] ***************************************
"""


def test_the_fact_is_read_whole_with_its_types() -> None:
    summary = drive.printed_fact(LOG, "migrate_web_summary")
    assert summary is not None
    assert (summary["task_id"], summary["seconds"], summary["fallback"],
            summary["worker_host"]) == ("08371cfa-cb14-4a36-ae52-d152702fb81d", 0.312, False,
                                        "10.89.20.43")
    assert summary["after"] == ["lab-macbookair"]
    assert summary["registry"].startswith("the Coordinator's registry lists 1 alive web worker "
                                          "serving tasks:web: web-worker-lab-macbookair on")


def test_an_answer_in_paragraphs_is_read_whole_and_so_is_what_follows_it() -> None:
    """A real model's answer has blank lines: YAML prints it as a block scalar."""
    log = LOG.replace(
        "        answer: '要約: 「今日の東京の天気は？」に関する内容です。'\n",
        "        answer: |-\n            今日の東京は晴れ。\n\n            最高気温は18度。\n")
    summary = drive.printed_fact(log, "migrate_web_summary")
    assert summary is not None
    assert summary["answer"] == "今日の東京は晴れ。\n\n最高気温は18度。"
    assert summary["task_id"] == "08371cfa-cb14-4a36-ae52-d152702fb81d"


def test_summary_lines_are_unfolded() -> None:
    assert demo.migration_summary(LOG) == [
        "task 08371cfa-cb14-4a36-ae52-d152702fb81d: done in 0.312 s, processed by 10.89.20.43 "
        "(web-worker-lab-macbookair), fallback False",
        "before: lab-ai-core",
        "after: lab-macbookair",
        "model: lab-macbookair: qwen2.5:0.5b (digest 5f7d5c2b1a0e)",
        "registry: the Coordinator's registry lists 1 alive web worker serving tasks:web: "
        "web-worker-lab-macbookair on lab-macbookair (10.89.20.43), pid 812, v2.1, heartbeat "
        "0.3 s ago",
        "the old web worker on lab-ai-core still held a task after 60 s of draining "
        "(migrate_web_drain_timeout): stopped anyway, within the bound of its stop",
    ]


def test_a_missing_summary_is_said_not_invented() -> None:
    assert demo.migration_summary("PLAY RECAP ***\n") == [
        "(no summary in the log: migrate-web.yml printed no migrate_web_summary)"]


def test_the_playbook_sets_and_prints_the_fact_the_demo_reads() -> None:
    playbook = (REPO / "migrate-web.yml").read_text()
    assert re.search(rf"^ +{re.escape(demo.SUMMARY_FACT)}:$", playbook, re.M)
    assert re.search(rf"^ +var: {re.escape(demo.SUMMARY_FACT)}$", playbook, re.M)
