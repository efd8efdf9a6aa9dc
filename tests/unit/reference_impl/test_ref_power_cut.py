"""A power cut keeps what was flushed, and that is enough (docs/lifecycle.md, "What must be on
disk before what").

The harness crashes processes, so it cannot see a commit that was not flushed. This test plays
the machine's part: before the turn and right after every synced commit (``synchronous=FULL``)
it copies the store's files: what the disk holds if the power goes at any moment before the
next flush (the ordered commits in between are lost), while the world has seen everything
that happened until that next flush (the worst moment to lose power). Each copy is then
opened by a fresh instance that recovers, as after the power came back. Whatever the cut:

* no write that ran before it runs again, and none is forgotten (it has a result now);
* what the UI was shown of a result before the cut is what the store says after it;
* every call of the turn ends with exactly one result in the conversation, and no result the
  disk held is lost or changed (unless the turn itself left nothing on the disk yet: then
  nothing ran, and the caller, who got no answer, sends it again).

An approval's prompt names a wait the disk keeps, and the write it asks for runs once at most.
The last tests show the checks bite: with the start record, the result or the wait committed
without a flush of its own (a text edit of the reference, as the self-test's mutants are),
they fail.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.contract import Outcome, TurnStatus, WaitStatus
from harness.mutants.source_patch import edit, edits
from ref_fakes import FakeWorld, Reply, allow, ask, call, config
from reference_impl import continuation, store as store_module
from reference_impl.store import STORE_FILE_NAME, Store

CALLS = tuple(call(f"c{i}", "write_file", path=f"/repo/{i}.txt", content=str(i))
              for i in range(1, 4))


def _copy(data_dir: str, target: Path) -> Path:
    target.mkdir(parents=True)
    for suffix in ("", "-wal"):  # -shm is rebuilt from the WAL on open
        source = Path(data_dir) / (STORE_FILE_NAME + suffix)
        if source.exists():
            shutil.copy(source, target / source.name)
    return target


def _three_writes(runtime, world) -> None:
    assert runtime.run_turn("s1", "write three files").status is TurnStatus.COMPLETED


def _cuts(impl, data_dir: str, into: Path, monkeypatch, *, calls=CALLS,
          rules=(allow("write_file"),), drive=_three_writes) -> list[tuple]:
    """Run ``drive`` (a turn of ``calls``); for the store before it and right after each
    synced commit: (copy, tool calls the world executed, projections and approval prompts it
    was shown, all by the next flush, or by the end for the last)."""
    world = FakeWorld(replies={"s1": [Reply("writing", calls)]})
    runtime = impl.open(data_dir, world)
    runtime.open_session(config(rules=rules))
    disks = [_copy(data_dir, into / "cut-0")]
    seen: list[tuple[tuple, tuple, tuple]] = []
    original_enter, original_exit = store_module._Transaction.__enter__, \
        store_module._Transaction.__exit__
    changes_at_begin = [0]

    def enter(self):
        changes_at_begin[0] = self._connection.total_changes
        return original_enter(self)

    def exit_then_copy(self, exc_type, *rest):
        result = original_exit(self, exc_type, *rest)
        # A commit flushes only what it wrote: one that changed nothing writes no WAL frame.
        wrote = self._connection.total_changes > changes_at_begin[0]
        synced = self._connection.execute("PRAGMA synchronous").fetchone()[0] >= 2
        if exc_type is None and synced and wrote:
            # what the world saw before this flush belongs to the disk of the flush before
            seen.append(_seen(world))
            disks.append(_copy(data_dir, into / f"cut-{len(disks)}"))
        return result

    with monkeypatch.context() as patched:
        patched.setattr(store_module._Transaction, "__enter__", enter)
        patched.setattr(store_module._Transaction, "__exit__", exit_then_copy)
        drive(runtime, world)
    runtime.close()
    seen.append(_seen(world))
    return [(disk, *world_saw) for disk, world_saw in zip(disks, seen)]


def _seen(world: FakeWorld) -> tuple[tuple, tuple, tuple]:
    return (tuple(i.identity.tool_call_id for i in world.ledger), tuple(world.ui),
            tuple(world.prompts))


def _check(impl, cuts) -> None:
    for cut, (disk, ran_before, shown_before, _) in enumerate(cuts):
        held = {op.identity.tool_call_id: op for op in impl.inspect(str(disk)).operations
                if op.outcome is not Outcome.NOT_STARTED}
        after = FakeWorld()  # the model answers "done." to whatever it is asked now
        restarted = impl.open(str(disk), after)
        restarted.recover()
        restarted.close()
        ran_again = {i.identity.tool_call_id for i in after.ledger}
        assert not ran_again & set(ran_before), (cut, "ran twice", ran_again & set(ran_before))
        observation = impl.inspect(str(disk))
        now = {op.identity.tool_call_id: op for op in observation.operations}
        for tool_call_id in ran_before:  # it ran: the disk knows, and it has a result now
            assert tool_call_id in now and now[tool_call_id].execution_started, \
                (cut, tool_call_id, "ran, and the disk forgot it")
            assert now[tool_call_id].outcome is not Outcome.NOT_STARTED, (cut, tool_call_id)
        for projection in shown_before:  # what the UI showed is what the store says
            assert now[projection.tool_call_id].outcome is projection.outcome, \
                (cut, projection.tool_call_id, "the UI showed", projection.outcome,
                 "the store says", now[projection.tool_call_id].outcome)
        for tool_call_id, before in held.items():  # what the disk held stays as it was
            assert (now[tool_call_id].outcome, now[tool_call_id].result_digest) == (
                before.outcome, before.result_digest), (cut, tool_call_id)
        store = Store.open(str(disk))
        try:
            messages = continuation.messages(store.connection, "s1")
        finally:
            store.close()
        if not any(m.role == "user" for m in messages):
            # The turn left nothing on the disk (its message rides on the first flush): the
            # caller never got an answer and sends it again; nothing may have run meanwhile.
            assert not ran_before and not shown_before, (cut, "ran before its turn was on disk")
            continue
        results = sorted(m.tool_call_id for m in messages if m.role == "tool")
        assert results == [c.tool_call_id for c in CALLS], (cut, results)
        assert observation.sessions[0].turn_status is TurnStatus.COMPLETED, cut


def test_recovery_from_the_disk_at_any_flush_runs_nothing_twice_and_loses_nothing(
        impl, data_dir, tmp_path, monkeypatch):
    cuts = _cuts(impl, data_dir, tmp_path / "disk", monkeypatch)
    # before the turn, then every write's start and result, and the turn's end
    assert len(cuts) == 1 + len(CALLS) * 2 + 1
    assert sum(1 for _, ran, _, _ in cuts if ran) >= len(CALLS)  # cuts where writes had run
    assert sum(1 for _, _, shown, _ in cuts if shown) >= len(CALLS)  # ... the UI showed them
    _check(impl, cuts)


def _approve_then_write(runtime, world) -> None:
    assert runtime.run_turn("s1", "write a file").status is TurnStatus.AWAITING_APPROVAL
    assert runtime.answer_approval(world.prompts[0].wait_id, True).status \
        is TurnStatus.COMPLETED


def _check_approvals(impl, cuts) -> None:
    for cut, (disk, ran_before, _, prompted_before) in enumerate(cuts):
        after = FakeWorld()
        restarted = impl.open(str(disk), after)
        restarted.recover()
        waits = {w.wait_id: w for w in impl.inspect(str(disk)).approval_waits}
        for prompt in prompted_before:  # the owner saw it: the disk knows what it names
            assert prompt.wait_id in waits, (cut, prompt.wait_id, "prompted, and the disk forgot it")
        pending = [w for w in waits.values() if w.status is WaitStatus.PENDING]
        for wait in pending:  # the owner answers (again, if the answer was lost)
            restarted.answer_approval(wait.wait_id, True)
        restarted.close()
        ran = [*ran_before, *(i.identity.tool_call_id for i in after.ledger)]
        assert ran.count("c1") <= 1, (cut, "ran twice", ran)
        if prompted_before or pending:  # the turn reached the question: it ends with one run
            assert ran.count("c1") == 1, (cut, ran)


def test_a_prompt_shown_before_a_cut_names_a_wait_the_disk_keeps(impl, data_dir, tmp_path,
                                                                monkeypatch):
    cuts = _cuts(impl, data_dir, tmp_path / "disk", monkeypatch, calls=CALLS[:1],
                 rules=(ask("write_file"),), drive=_approve_then_write)
    assert any(prompted for *_, prompted in cuts)
    _check_approvals(impl, cuts)


EX = "reference_impl.execution"
UNFLUSHED = {
    "start": edit(EX, find="        with self._store.transaction() as conn:\n"
                           "            # Rechecked inside the claim:",
                  replace="        with self._store.transaction(Durability.ORDERED) as conn:\n"
                          "            # Rechecked inside the claim:"),
    "result": edit(EX, find="        escalation = None\n"
                            "        with self._store.transaction() as conn:\n",
                   replace="        escalation = None\n"
                           "        with self._store.transaction(Durability.ORDERED) as conn:\n"),
}


@pytest.mark.parametrize("step, says", [("start", "ran, and the disk forgot it"),
                                        ("result", "the UI showed")])
def test_a_write_step_left_unflushed_fails_the_checks(impl, data_dir, tmp_path, monkeypatch,
                                                      step, says):
    with edits(UNFLUSHED[step])():
        cuts = _cuts(impl, data_dir, tmp_path / "disk", monkeypatch)
    with pytest.raises(AssertionError, match=says):
        _check(impl, cuts)


def test_a_wait_left_unflushed_fails_the_checks(impl, data_dir, tmp_path, monkeypatch):
    unflushed_wait = edit(EX, find="    def _open_wait(self, op: OperationRecord) -> None:\n"
                                   "        with self._store.transaction() as conn:\n",
                          replace="    def _open_wait(self, op: OperationRecord) -> None:\n"
                                  "        with self._store.transaction(Durability.ORDERED)"
                                  " as conn:\n")
    with edits(unflushed_wait)():
        cuts = _cuts(impl, data_dir, tmp_path / "disk", monkeypatch, calls=CALLS[:1],
                     rules=(ask("write_file"),), drive=_approve_then_write)
    with pytest.raises(AssertionError, match="prompted, and the disk forgot it"):
        _check_approvals(impl, cuts)
