"""The session gate: turns share it, what needs the session alone waits for them."""

from __future__ import annotations

import threading
import time

from worker.sessions.gate import SessionGate


def test_turns_share_the_gate_and_learn_whether_they_ran_alone() -> None:
    gate = SessionGate()
    with gate.turn() as a:
        assert a.first and gate.solo(a)
        with gate.turn() as b:
            assert not b.first and gate.solo(b) is False
            assert gate.running == 2
        assert not gate.solo(a)  # another started while it ran
    with gate.turn() as c:
        assert gate.solo(c)
    assert gate.running == 0


def test_alone_waits_for_the_turns_and_holds_back_new_ones() -> None:
    gate = SessionGate()
    order: list[str] = []
    entered = threading.Event()

    def turn(name: str, hold: float) -> None:
        with gate.turn():
            entered.set()
            time.sleep(hold)
            order.append(name)

    first = threading.Thread(target=turn, args=("first", 0.2))
    first.start()
    entered.wait(2)

    def alone() -> None:
        with gate.alone():
            order.append("alone")

    waiter = threading.Thread(target=alone)
    waiter.start()
    time.sleep(0.05)
    late = threading.Thread(target=turn, args=("late", 0.0))
    late.start()
    for t in (first, waiter, late):
        t.join(3)
    assert order == ["first", "alone", "late"]


def test_try_alone_refuses_while_a_turn_runs() -> None:
    gate = SessionGate()
    with gate.turn():
        assert not gate.try_alone()
    assert gate.try_alone()
    gate.release()
    with gate.turn():
        pass
