"""The services run sandboxed, as systemd-analyze security scores the running units on the
lab's nodes: the Coordinator and the workers at 2.0 or lower, Ollama (here its stand-in,
under the role's drop-in) at 4.0 or lower; and they still serve that way, a web search
summarised through Ollama and an inference task both done."""

from __future__ import annotations

import re
import time

#: unit -> the highest exposure it may have (systemd-analyze: 0 safest, 10 unsafe).
BOUNDS = {
    "coordinator.service": 2.0,
    "web-worker.service": 2.0,
    "inference-worker.service": 2.0,
    "ollama.service": 4.0,
}
EXPOSURE = re.compile(r"Overall exposure level for (\S+): (\d+(?:\.\d+)?)")


def exposures(cluster) -> dict[tuple[str, str], float]:
    """(node, unit) -> the exposure systemd-analyze gives each running unit of BOUNDS."""
    scores = {}
    for name, node in cluster.nodes.items():
        listed = node.sh("systemctl", "list-units", "--type=service", "--state=running",
                         "--no-legend", "--plain", check=True).stdout
        for unit in (line.split()[0] for line in listed.splitlines() if line.strip()):
            if unit in BOUNDS:
                report = node.sh("systemd-analyze", "security", "--no-pager", unit,
                                 check=True).stdout
                scores[(name, unit)] = float(EXPOSURE.search(report).group(2))
    return scores


def test_running_units_are_sandboxed_within_their_bounds_and_still_serve(cluster) -> None:
    scores = exposures(cluster)
    assert {unit for _, unit in scores} == set(BOUNDS), scores
    assert {key: score for key, score in scores.items() if score > BOUNDS[key[1]]} == {}, scores
    for task_type in ("web_search", "generate"):
        task_id = cluster.coordinator.route(task_type=task_type)
        task = cluster.coordinator.finished(task_id, time.monotonic() + 120)
        assert task["status"] == "done" and task["fallback"] is False, task
    cluster.figures.append({"test": "exposure", **{f"{n} {u}": s for (n, u), s in scores.items()}})
