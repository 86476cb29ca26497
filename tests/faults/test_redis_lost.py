"""A worker killed mid-task while Redis loses its processing list must still finish the task
when it restarts: nothing else would (the Reaper leaves web tasks of an alive worker alone)."""

from __future__ import annotations

import signal

from tests.workers.conftest import wait_until


def test_restarted_worker_finishes_a_running_task_redis_forgot(web_env, busy_worker, start_worker,
                                                                coordinator, tasks, ollama,
                                                                rds):
    worker, task_id = busy_worker(web_env, latency=30, prompt="fault: redis forgot me")
    worker.signal(signal.SIGKILL)
    worker.wait_exit()
    processing = f"processing:{web_env['WORKER_ID']}"
    rds.delete(processing)  # what a Redis restart without persistence does to the list

    ollama.config(latency=0)
    again = start_worker(web_env)
    row = tasks.wait_status(task_id, "done", "failed")
    assert (row["status"], row["attempts"], row["fallback"]) == ("done", 2, False)
    again.wait_for(f"WARNING Task {task_id} is running under {web_env['WORKER_ID']} but "
                   f"missing from {processing} (Redis lost it); finishing it")
    wait_until(lambda: rds.llen(processing) == 0, 10, "the id to leave the processing list")
