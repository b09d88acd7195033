"""The agent's side of overlapping requests: threads on demand, notifications by target."""

from __future__ import annotations

import select
import threading

from worker.agent.control import Inbox
from worker.agent.threads import RequestThreads


def test_requests_run_at_once_on_threads_made_on_demand() -> None:
    release = threading.Event()
    started: list[object] = []
    lock = threading.Lock()

    def serve(req: dict[str, object]) -> None:
        with lock:
            started.append(req["id"])
        release.wait(5)

    threads = RequestThreads(serve, limit=3)
    for i in range(4):
        threads.submit({"id": i})
    deadline = threading.Event()
    for _ in range(50):
        with lock:
            if len(started) == 3:
                break
        deadline.wait(0.02)
    assert sorted(started) == [0, 1, 2] and threads.size == 3  # the 4th waits for a thread
    release.set()
    for _ in range(100):
        with lock:
            if len(started) == 4:
                break
        deadline.wait(0.02)
    assert started[-1] == 3


def test_notifications_go_to_their_target_and_wake_its_selector() -> None:
    inbox = Inbox()
    exec_box = inbox.open(7, "exec")
    pty_box = inbox.open(8, "pty")
    inbox.route({"op": "cancel", "target": 7, "notify": True})
    inbox.route({"op": "pty_input", "data_b64": "aGk=", "notify": True})  # no target: the pty
    assert select.select([exec_box.fileno(), pty_box.fileno()], [], [], 1)[0]
    assert exec_box.take() == [{"op": "cancel", "target": 7, "notify": True}]
    assert pty_box.take() == [{"op": "pty_input", "data_b64": "aGk=", "notify": True}]
    inbox.done(7)
    inbox.route({"op": "cancel", "target": 7, "notify": True})  # late: a no-op
    inbox.close_all()
    assert pty_box.take() == [None]
    late = inbox.open(9, "exec")
    assert late.take() == [None]  # EOF already seen
