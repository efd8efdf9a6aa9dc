"""``async`` durability's kill point: while a failpoint request waits for the harness, the
background saver starts no durable write, so a kill there finds the store as it was when the
failpoint was called (no round trip's grace); the saver's own failpoints do not block it."""

from __future__ import annotations

import threading

from harness.adapters.langgraph_runtime import KillPointWorld
from harness.contract import Failpoint


class HeldWorld:
    """A world whose failpoint blocks until the test answers it (the harness's round trip)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.answer = threading.Event()

    def failpoint(self, name, context):  # noqa: ANN001
        self.entered.set()
        assert self.answer.wait(10), "the test never answered the failpoint"


def _saver(world: KillPointWorld, done: threading.Event) -> threading.Thread:
    def save() -> None:
        world.wait_for_saver_turn()
        done.set()
    thread = threading.Thread(target=save, daemon=True)
    thread.start()
    return thread


def test_a_save_waits_while_another_threads_failpoint_is_unanswered():
    held = HeldWorld()
    world = KillPointWorld(held)
    with world.admitting():
        node = threading.Thread(target=world.failpoint, daemon=True,
                                args=(Failpoint.BEFORE_MODEL_REQUEST, {"session_id": "s1"}))
        node.start()
        assert held.entered.wait(10)
        saved = threading.Event()
        saver = _saver(world, saved)
        assert not saved.wait(0.3), "a save started while the failpoint awaited the harness"
        held.answer.set()  # the harness answers (no crash): the save goes on
        assert saved.wait(10)
        node.join(10)
        saver.join(10)


def test_a_save_is_not_held_by_its_own_thread_nor_when_no_failpoint_waits():
    world = KillPointWorld(HeldWorld())
    saved = threading.Event()
    _saver(world, saved).join(10)
    assert saved.is_set()
    # the saver's own failpoint (after_result_saved) is on its thread: never blocks it
    world._pending[threading.get_ident()] = 1  # noqa: SLF001
    world.wait_for_saver_turn()
