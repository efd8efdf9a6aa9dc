"""Readings of the durable store: probes at failpoints and observations between steps.

Guarantees:

* every reading is ``Implementation.inspect(data_dir)``, checked against the contract's
  :class:`~harness.contract.Observation` before it is recorded; a value off the contract, or
  an exception, is a ``DRIVER_RAISED`` of ``inspect`` (``expected: false``) and a run error
  naming the point, never a recorded observation;
* a reading equal to the previous checked one is recorded as that same object (most
  failpoints sit between writes), so the trace holds and serializes it once;
* :meth:`StoreProbe.observe` (the main thread, between steps) reads in a thread of its own
  under the run's time limit: a hang is ``HANG``, the run hung; :meth:`StoreProbe.probe` (the
  implementation's thread, from the world) reads in the caller's thread and does nothing
  once the run is finished;
* each recorded reading is an :class:`~harness.trace.record.ObservationPoint` at the log's latest
  index plus an ``OBSERVED`` event naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.contract import Observation
from harness.contract.value_checks import ContractViolation, value_problem
from harness.running.driving.calls import Call, forget
from harness.running.driving.state import RunState
from harness.trace.flat_rows import flat_key
from harness.trace.record import Kind, ObservationPoint
from harness.trace.sequence_delta import common_prefix


class CheckedParts:
    """The rows (views) of the last observation that passed the contract check, so the next
    one checks only its new rows: an implementation that reads the store incrementally hands
    back the very same view objects for unchanged rows, and most probes change one row.

    :meth:`fit` says True only when every field has its exact contract type and every row is
    one already checked in the same field (the same object, held here so its id cannot be
    reused) or passes its own check; anything else (a subclass, a wrong field) is left to
    the full check, which names the problem. A field whose tuple is the very tuple of the
    last observation that passed holds only rows checked then (a tuple cannot change), so
    its rows are not looked at again: most readings change one or two parts of the store,
    and an implementation that keeps the unchanged parts hands back the same tuples. A row
    object mutated after its check is no more checked than the earlier observation that
    already held it."""

    _ROW_TYPES: dict[str, Any] | None = None

    def __init__(self) -> None:
        self._fields: dict[str, tuple[tuple[Any, ...], dict[int, Any]]] = {}
        """Per field of the last observation that passed: its tuple and the rows checked in
        that field so far, by id (held: the trace holds every reading anyway)."""
        self._flat_passed: set[Any] = set()
        """(expected type, value key (:func:`harness.trace.flat_rows.flat_key`)) of flat rows that
        passed: the check of a flat row depends on nothing but the type expected, its type
        and its fields' types and values, and a store read afresh rebuilds equal rows
        (checkpoints, failure table)."""

    @classmethod
    def _row_types(cls) -> dict[str, Any]:
        if cls._ROW_TYPES is None:
            import typing

            hints = typing.get_type_hints(Observation)
            cls._ROW_TYPES = {f.name: (typing.get_args(hints[f.name])[0]
                                       if typing.get_origin(hints[f.name]) is tuple
                                       else hints[f.name])
                              for f in dataclasses.fields(Observation)}
        return cls._ROW_TYPES

    def fit(self, observation: Any) -> bool:
        if type(observation) is not Observation:
            return False
        fields: dict[str, tuple[tuple[Any, ...], dict[int, Any]]] = {}
        for name, row_type in self._row_types().items():
            value = getattr(observation, name)
            if row_type is int:
                if type(value) is not int:
                    return False
                continue
            if type(value) is not tuple:
                return False
            kept = self._fields.get(name)
            if kept is not None and kept[0] is value:
                fields[name] = kept
                continue
            # the head this tuple shares with the last one that passed (the same objects,
            # found in C) is checked already; of the rest, rows checked before are known
            head = common_prefix(kept[0], value) if kept is not None else 0
            known = kept[1] if kept is not None else {}  # only rows that passed are added
            for at in range(head, len(value)):
                row = value[at]
                if known.get(id(row)) is not row:
                    if not self._passes(row_type, row):
                        return False
                    known[id(row)] = row
            fields[name] = (value, known)
        self._fields = fields
        return True

    def _passes(self, row_type: Any, row: Any) -> bool:
        flat = flat_key(row)
        key = (row_type, flat)  # the same row may be checked against another field's type
        if flat is not None and key in self._flat_passed:
            return True
        if value_problem(row_type, row, ""):
            return False
        if flat is not None:
            self._flat_passed.add(key)
        return True


class StoreProbe:
    """Reads, checks and records the durable store for one run."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self._last_observation: Observation | None = None
        """The latest checked observation (see :meth:`_inspect`)."""
        self._checked_parts = CheckedParts()
        """The rows of the latest checked observation (see :class:`CheckedParts`)."""

    def _inspect(self) -> Observation:
        observation = self.state.impl.inspect(self.state.data_dir)
        last = self._last_observation
        if observation is last:  # checked when it was first returned
            return observation
        try:
            unchanged = last is not None and type(observation) is Observation \
                and bool(observation == last)
        except Exception:  # noqa: BLE001 - a hostile value's __eq__; the check says more
            unchanged = False
        if unchanged:
            # The store did not change between probes (most failpoints sit between writes):
            # keep one object, so the trace holds and serializes it once.
            return last  # type: ignore[return-value]
        if not self._checked_parts.fit(observation):
            problem = value_problem(Observation, observation, "inspect returned")
            if problem:
                raise ContractViolation(problem)
        self._last_observation = observation
        return observation

    def _record(self, instance: int, label: str, observation: Observation) -> None:
        state = self.state
        with state.obs_lock:
            point = ObservationPoint(state.log.last_index(), label, observation)
            state.observations.append(point)
            number = len(state.observations) - 1
        state.event(Kind.OBSERVED, instance, {"label": label, "observation_index": number})

    def _failed(self, instance: int, label: str, exc: BaseException) -> None:
        state = self.state
        state.event(Kind.DRIVER_RAISED, instance, {
            "method": "inspect", "exception": type(exc).__name__, "message": str(exc),
            "expected": False, "label": label})
        if isinstance(exc, ContractViolation):
            state.fail(f"at {label}, {exc}")
        else:
            state.fail(f"inspect raised {type(exc).__name__} at {label}: {exc}")

    def observe(self, instance: int, label: str) -> None:
        """Read the durable store from the main thread, under the time limit."""
        state = self.state
        if state.hung:
            return
        call = Call(self._inspect, state.cond, "lh-inspect")
        call.thread.start()
        with state.cond:
            state.cond.wait_for(lambda: call.done, timeout=state.limit)
        if not call.done:
            state.abandoned.append(("inspect", call))
            state.event(Kind.HANG, instance, {"method": "inspect", "limit_s": state.limit})
            state.fail(f"inspect did not return within {state.limit:g}s at {label} (hang)")
            state.hung = True
            return
        value, exc = call.take()
        if exc is not None:
            self._failed(instance, label, exc)
            forget(exc)
            return
        self._record(instance, label, value)

    def probe(self, instance: int, label: str) -> None:
        """Read the durable store from the implementation's thread (a world hook)."""
        if self.state.finished:
            return
        try:
            observation = self._inspect()
        except Exception as exc:
            self._failed(instance, label, exc)
            return
        self._record(instance, label, observation)
