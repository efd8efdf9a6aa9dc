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

The last test shows the checks bite: with the start record, or the result, committed without
a flush of its own (a text edit of the reference, as the self-test's mutants are), they fail.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.contract import Outcome, TurnStatus
from harness.selftest.source_patch import edit, edits
from ref_fakes import FakeWorld, Reply, allow, call, config
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


def _cuts(impl, data_dir: str, into: Path, monkeypatch) -> list[tuple[Path, tuple, tuple]]:
    """Run a turn of three allowed writes; for the store before the turn and right after each
    synced commit: (copy, tool calls the world executed and projections it was shown by the
    next flush, or by the end for the last)."""
    world = FakeWorld(replies={"s1": [Reply("writing", CALLS)]})
    runtime = impl.open(data_dir, world)
    runtime.open_session(config(rules=(allow("write_file"),)))
    disks = [_copy(data_dir, into / "cut-0")]
    seen: list[tuple[tuple, tuple]] = []
    original_exit = store_module._Transaction.__exit__

    def exit_then_copy(self, exc_type, *rest):
        result = original_exit(self, exc_type, *rest)
        synced = self._connection.execute("PRAGMA synchronous").fetchone()[0] >= 2
        if exc_type is None and synced:
            # what the world saw before this flush belongs to the disk of the flush before
            seen.append((tuple(i.identity.tool_call_id for i in world.ledger), tuple(world.ui)))
            disks.append(_copy(data_dir, into / f"cut-{len(disks)}"))
        return result

    with monkeypatch.context() as patched:
        patched.setattr(store_module._Transaction, "__exit__", exit_then_copy)
        assert runtime.run_turn("s1", "write three files").status is TurnStatus.COMPLETED
    runtime.close()
    seen.append((tuple(i.identity.tool_call_id for i in world.ledger), tuple(world.ui)))
    return [(disk, ran, shown) for disk, (ran, shown) in zip(disks, seen)]


def _check(impl, cuts) -> None:
    for cut, (disk, ran_before, shown_before) in enumerate(cuts):
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
    assert sum(1 for _, ran, _ in cuts if ran) >= len(CALLS)  # cuts where writes had run
    assert sum(1 for _, _, shown in cuts if shown) >= len(CALLS)  # ... and the UI showed them
    _check(impl, cuts)


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
