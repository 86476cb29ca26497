"""The alert rules (files/prometheus/coordinator.rules.yml) held to promtool's checker and to
their unit tests (coordinator.rules.test.yml beside this file), every alert to a case where it
fires and one where it does not, and every runbook_url to a section of docs/operating.md."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from lab.drive import REPO

from .test_metrics import PROMTOOL, exposed

RULES = REPO / "files" / "prometheus" / "coordinator.rules.yml"
RULE_TESTS = Path(__file__).with_name("coordinator.rules.test.yml")
OPERATING = REPO / "docs" / "operating.md"
RUNBOOK = "docs/operating.md#"
JOB = "coordinator"


def promtool(*args: str) -> tuple[int, str]:
    assert PROMTOOL, "promtool not found: ./dev installs it (Debian's prometheus package)"
    done = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def alerts() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings: lower case, punctuation but hyphens and
    underscores dropped, spaces to hyphens, a repeated one suffixed -1, -2..."""
    anchors: set[str] = set()
    seen: Counter[str] = Counter()
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.+)", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return anchors


def test_promtool_checks_the_rules_and_their_tests_pass() -> None:
    code, output = promtool("check", "rules", str(RULES))
    assert code == 0, output
    assert f"SUCCESS: {len(alerts())} rules found" in output, output
    code, output = promtool("test", "rules", str(RULE_TESTS))
    assert code == 0, output


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for case in test["alert_rule_test"]]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert (firing, quiet) == (set(alerts()), set(alerts()))


def test_every_alert_says_how_bad_what_to_do_and_where_the_runbook_is() -> None:
    anchors = github_anchors(OPERATING.read_text())
    for name, rule in alerts().items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert set(rule["annotations"]) == {"summary", "runbook_url"}, name
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOK) and url.removeprefix(RUNBOOK) in anchors, (name, url)


def test_the_rules_read_only_exposed_metrics_of_the_documented_job() -> None:
    exprs = " ".join(rule["expr"] for rule in alerts().values())
    assert set(re.findall(r"\b(coordinator_\w+)", exprs)) <= set(exposed())
    assert set(re.findall(r'job="(\w+)"', exprs)) == {JOB}
    # The scrape configuration docs/coordinator.md shows names the job the rules expect.
    assert re.findall(r"job_name: (\w+)", (REPO / "docs" / "coordinator.md").read_text()) == [JOB]


def test_github_anchors_follow_githubs_rules() -> None:
    text = "# A `task`, by hand!\n```sh\n# not a heading\n```\n## Repeat\n## Repeat\n"
    assert github_anchors(text) == {"a-task-by-hand", "repeat", "repeat-1"}
