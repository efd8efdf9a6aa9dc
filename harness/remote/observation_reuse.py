"""Decoding ``inspect`` answers of one data dir with the previous reading's objects reused.

An in-process implementation may hand back the same :class:`~harness.contract.Observation`
(and the same row views) while its store did not change, and the runner then checks and
encodes each object once. Over the wire every answer is new JSON; decoding it afresh
(``from_json`` of every row, then the runner's full check, then the trace's canonical text of
every distinct object) made a store reading several times dearer in process mode.

Guarantees of :meth:`ObservationReuse.decode`:

* the value is exactly what ``from_json(Observation, data)`` gives (the same errors for the
  same data), except that it *is* the previous answer's object when the answer's text is
  identical (compared member by member, rows by their own text), and each row (an element of
  one of the observation's tuples) *is* the previous reading's row object when that row's
  text is identical. The text is ``repr`` of the decoded JSON data: Python's literal syntax
  for dicts, lists, strings, numbers, booleans and null, which tells every type and value
  apart (``1``, ``1.0`` and ``True``; key order and all), so equal text means an equal
  decoded value of the same types (``repr`` is about twice as fast as encoding the JSON again);
* only the latest reading is remembered (memory bounded by one observation); :meth:`forget`
  drops it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from harness.contract import ContractError, Observation, from_json
from harness.remote.value_decoders import decoder_for

_FIELDS = {field.name: typing.get_type_hints(Observation)[field.name]
           for field in dataclasses.fields(Observation)}
_ROW_TYPES = {name: typing.get_args(kind)[0] for name, kind in _FIELDS.items()
              if typing.get_origin(kind) is tuple}
_FIELD_DECODERS = {name: decoder_for(kind) for name, kind in _FIELDS.items()}
_ROW_DECODERS = {name: decoder_for(kind) for name, kind in _ROW_TYPES.items()}


_text = repr
"""The exact text of decoded JSON data (see the module guarantee)."""


class ObservationReuse:
    """The decoder of one data dir's readings (see the module doc)."""

    def __init__(self) -> None:
        self._signature: tuple[tuple[str, Any], ...] | None = None
        self._observation: Observation | None = None
        self._rows: dict[tuple[str, str], list[Any]] = {}
        self.token = ""
        """The server's token for the latest reading (``inspect_since``), "" for none."""
        self.issuer: object = None
        """Who issued :attr:`token` (an inspector process): a token is only sent back to it."""

    def forget(self) -> None:
        self._signature, self._observation, self._rows = None, None, {}
        self.token, self.issuer = "", None

    def since(self, issuer: object) -> str:
        """The token to send ``issuer`` with ``inspect_since`` ("" if it did not issue it)."""
        return self.token if issuer is self.issuer and self._observation is not None else ""

    def decode_since(self, issuer: object, since: str, data: Any, where: str) -> Observation:
        """The Observation an ``inspect_since`` answer stands for (``since`` was sent to
        ``issuer``): the latest reading again when it says "unchanged" for that token; a
        :class:`ContractError` when it says so for any other, or has another shape."""
        if not isinstance(data, dict) or not set(data) <= {"reading", "observation"} \
                or not isinstance(data.get("reading"), str) or not data["reading"]:
            raise ContractError(f"{where}: expected {{\"reading\": non-empty text, "
                                f"\"observation\": Observation or null}}")
        raw = data.get("observation")
        if raw is None:
            if not since or data["reading"] != since or self._observation is None:
                raise ContractError(f"{where}: \"unchanged\" (observation null) for reading "
                                    f"{data['reading']!r}, but the reading named was "
                                    f"{since!r}: a server may only say unchanged for the "
                                    "token it answered last for this data dir")
            return self._observation
        observation = self.decode(raw, f"{where}.observation")
        self.token, self.issuer = data["reading"], issuer
        return observation

    def decode(self, data: Any, where: str) -> Observation:
        if not isinstance(data, dict) or not set(data) <= set(_FIELDS):
            return from_json(Observation, data, where)  # its error, word for word
        # The exact text of every row and of every other member, once: together, in the
        # answer's order, they stand for the answer's text (an identical answer is the previous
        # reading), and each row's is the key of its previous object.
        try:
            texts = {name: ([_text(item) for item in raw] if name in _ROW_TYPES
                            and isinstance(raw, list) else _text(raw))
                     for name, raw in data.items()}
        except (TypeError, ValueError):
            return from_json(Observation, data, where)
        signature = tuple(texts.items())
        if signature == self._signature and self._observation is not None:
            return self._observation
        # Each previous row object is handed out at most once per reading: two equal rows
        # stay two objects, as a fresh decoding would give.
        previous = {key: list(objects) for key, objects in self._rows.items()}
        rows: dict[tuple[str, str], list[Any]] = {}
        values: dict[str, Any] = {}
        for name, raw in data.items():
            row_decoder = _ROW_DECODERS.get(name)
            if row_decoder is None or not isinstance(raw, list):
                values[name] = _FIELD_DECODERS[name](raw, f"{where}.{name}")
                continue
            items = []
            for index, (item, item_text) in enumerate(zip(raw, texts[name])):
                key = (name, item_text)
                spare = previous.get(key)
                row = spare.pop() if spare else row_decoder(item, f"{where}.{name}[{index}]")
                rows.setdefault(key, []).append(row)
                items.append(row)
            values[name] = tuple(items)
        try:
            observation = Observation(**values)
        except TypeError as exc:
            raise ContractError(f"{where}: Observation: {exc}") from None
        self._signature, self._observation, self._rows = signature, observation, rows
        return observation
