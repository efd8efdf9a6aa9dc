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

from harness.contract import ContractError, Observation, from_json, type_hints
from harness.remote.protocol import OBSERVATION_ROW_PARTS
from harness.remote.value_decoders import decoder_for

_FIELDS = {field.name: type_hints(Observation)[field.name]
           for field in dataclasses.fields(Observation)}
_FIELD_DECODERS = {name: decoder_for(kind) for name, kind in _FIELDS.items()}
_ROW_DECODERS = {name: decoder_for(typing.get_args(_FIELDS[name])[0])
                 for name in OBSERVATION_ROW_PARTS}
"""Per row part, the decoder of one of its rows."""


_text = repr
"""The exact text of decoded JSON data (see the module guarantee)."""


class ObservationReuse:
    """The decoder of one data dir's readings (see the module doc)."""

    def __init__(self) -> None:
        self._texts: dict[str, Any] | None = None
        """The latest reading's text per member (a row part: the list of its rows' texts)."""
        self._observation: Observation | None = None
        self._rows: dict[str, dict[str, list[Any]]] = {}
        """Per row part of the latest reading: each row text's objects."""
        self.token = ""
        """The server's token for the latest reading (``inspect_since``), "" for none."""
        self.issuer: object = None
        """Who issued :attr:`token` (an inspector process): a token is only sent back to it."""

    def forget(self) -> None:
        self._texts, self._observation, self._rows = None, None, {}
        self.token, self.issuer = "", None

    def since(self, issuer: object) -> str:
        """The token to send ``issuer`` with ``inspect_since`` ("" if it did not issue it)."""
        return self.token if issuer is self.issuer and self._observation is not None else ""

    def decode_since(self, issuer: object, since: str, data: Any, where: str) -> Observation:
        """The Observation an ``inspect_since`` answer stands for (``since`` was sent to
        ``issuer``): the latest reading again when it says "unchanged" for that token; a
        :class:`ContractError` when it says so for any other, or has another shape."""
        return self._decode_answer(issuer, since, data, where, parts=False)

    def decode_parts(self, issuer: object, since: str, data: Any, where: str) -> Observation:
        """The Observation an ``inspect_parts`` answer stands for: as :meth:`decode_since`,
        and the row parts it names ``unchanged`` are the latest reading's (the very tuples);
        a :class:`ContractError` when it names any for another token than ``since``, names
        what is not a row part, or also sends a part it names."""
        return self._decode_answer(issuer, since, data, where, parts=True)

    def _decode_answer(self, issuer: object, since: str, data: Any, where: str,
                       parts: bool) -> Observation:
        members = {"reading", "observation", "unchanged"} if parts else {"reading", "observation"}
        if not isinstance(data, dict) or not set(data) <= members \
                or not isinstance(data.get("reading"), str) or not data["reading"]:
            raise ContractError(f"{where}: expected {{\"reading\": non-empty text, "
                                f"\"observation\": Observation or null"
                                + (", \"unchanged\": [part name, ...]}" if parts else "}"))
        kept = data.get("unchanged", [])
        if not isinstance(kept, list) or len(set(map(repr, kept))) != len(kept) \
                or not all(isinstance(name, str) and name in _ROW_DECODERS for name in kept):
            raise ContractError(f"{where}.unchanged: expected distinct names of row parts "
                                f"({', '.join(OBSERVATION_ROW_PARTS)}), got {kept!r}")
        raw = data.get("observation")
        if raw is None or kept:
            if not since or self._observation is None or self._texts is None \
                    or (raw is None and data["reading"] != since):
                said = ("\"unchanged\" (observation null)" if raw is None
                        else f"parts {kept} unchanged")
                raise ContractError(f"{where}: {said} for reading {data['reading']!r}, but "
                                    f"the reading named was {since!r}: a server may only say "
                                    "unchanged for the token it answered last for this data "
                                    "dir")
            if raw is None:
                if kept:
                    raise ContractError(f"{where}: \"unchanged\" names parts of a reading "
                                        "that is unchanged as a whole (observation null)")
                return self._observation
            if isinstance(raw, dict) and set(kept) & set(raw):
                raise ContractError(f"{where}.observation: part(s) "
                                    f"{sorted(set(kept) & set(raw))} both sent and said "
                                    "unchanged")
        observation = self.decode(raw, f"{where}.observation", tuple(kept))
        self.token, self.issuer = data["reading"], issuer
        return observation

    def decode(self, data: Any, where: str, kept: tuple[str, ...] = ()) -> Observation:
        """The reading ``data`` stands for; the row parts named in ``kept`` (absent from it)
        are the latest reading's (the caller checked there is one)."""
        if not isinstance(data, dict) or not set(data) <= set(_FIELDS):
            return from_json(Observation, data, where)  # its error, word for word
        # The exact text of every row and of every other member, once: together they stand
        # for the answer's text (an identical answer is the previous reading), and each
        # row's is the key of its previous object.
        try:
            texts = {name: ([_text(item) for item in raw] if name in _ROW_DECODERS
                            and isinstance(raw, list) else _text(raw))
                     for name, raw in data.items()}
        except (TypeError, ValueError):
            return from_json(Observation, data, where)
        values: dict[str, Any] = {}
        rows: dict[str, dict[str, list[Any]]] = {}
        if kept:
            assert self._texts is not None and self._observation is not None
            for name in kept:
                texts[name] = self._texts.get(name, [])
                values[name] = getattr(self._observation, name)
                rows[name] = self._rows.get(name, {})
        if texts == self._texts and self._observation is not None:
            return self._observation
        for name, raw in data.items():
            row_decoder = _ROW_DECODERS.get(name)
            if row_decoder is None or not isinstance(raw, list):
                values[name] = _FIELD_DECODERS[name](raw, f"{where}.{name}")
                continue
            # Each previous row object is handed out at most once per reading: two equal
            # rows stay two objects, as a fresh decoding would give.
            previous = {text: list(objects) for text, objects in self._rows.get(name, {}).items()}
            part: dict[str, list[Any]] = {}
            items = []
            for index, (item, item_text) in enumerate(zip(raw, texts[name])):
                spare = previous.get(item_text)
                row = spare.pop() if spare else row_decoder(item, f"{where}.{name}[{index}]")
                part.setdefault(item_text, []).append(row)
                items.append(row)
            values[name] = tuple(items)
            rows[name] = part
        try:
            observation = Observation(**values)
        except TypeError as exc:
            raise ContractError(f"{where}: Observation: {exc}") from None
        self._texts, self._observation, self._rows = texts, observation, rows
        return observation
