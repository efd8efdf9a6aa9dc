"""The world's view of a run: what the simulated world itself observed, in order, in a form
that two implementations can be compared by; and where two such views first part.

Guarantees:

* :func:`world_view` is a pure function of the trace (no clock, no I/O): the same trace always
  gives the same view, and a trace's view depends on nothing but its world events;
* it keeps only the world's own observations, in trace order: the model requests it served
  (``model_request``: the conversation and tools the model received; ``model_stream_end``:
  what it answered), the exact bytes the classifier received (``classifier_request``), the
  ledger (``tool_executed``, ``tool_unavailable``), the approval prompts shown
  (``approval_prompt``), the UI publications (``ui_publish``) and the faults it injected
  (``failpoint`` events whose fault fired, reduced to failpoint, hit, action and the plan's
  parameters). Everything else is left out: failpoint hits where nothing fired (where and how
  often an implementation signals its lifecycle points is its own structure; their placement
  is judged by the failpoint preconditions), the implementation's realtime events and store
  readings (its own word, judged by the criteria), the harness's driver calls and crashes;
* what an implementation may choose freely is normalised (:data:`NORMALISED`), so two
  conforming implementations that made different allowed choices have the same view:

  - ids it allocates (request ids, wait ids: ``docs/contract.md``, "Ids you allocate") are
    renamed by order of first appearance in the view, ``request#1``, ``wait#1``...; equal ids
    stay equal and different ones different, so a reused request id or a wait shown twice is
    still seen;
  - its wording (a tool message's ``content`` in a model request, an approval prompt's
    ``reason``, a projection's ``reason``) is replaced by :data:`WORDING`, unless
    ``exact_text`` (then the text is compared as received: for a release against the last
    one, where wording changes are worth seeing);
  - lists whose order means nothing in the contract (a model request's ``tools``, a
    projection's ``recovery_actions``) are sorted;

* what the contract fixes is kept as the world saw it and compared exactly: execution ids and
  args digests (computed by the contract's rules: a different one is an X2 defect), the
  classifier's raw bytes (L2.2), tool arguments, the model's and the user's text, outcomes,
  statuses and failure kinds, the world's own counters (``ledger_seq``, ``invocation``,
  ``review``, ``script_index``) and instance numbers (the harness's: 0, then one more per
  restart). No world event carries a clock reading (the world's clock moves only by the
  scenario's scripted delays, and ``delay_s`` is the script's), so there is none to
  normalise;
* :func:`first_world_divergence` is pure: None exactly when both views are equal event by
  event (trace indexes aside: they count the implementation's own events too), otherwise the
  first position where they part, both sides' events there (None on a side whose view ended),
  the fields that differ and a few events of context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from harness.contract import canonical_json
from harness.trace.lines import DEFAULT_WIDTH, compact, render_event
from harness.trace.record import Kind, Source, Trace, TraceEvent

WORDING = "<wording>"
"""What an implementation-worded text becomes in a view without ``exact_text``."""

CONTEXT = 3
"""Events of context kept before and after a divergence."""

MAX_FIELDS = 8
"""At most this many differing fields are named per divergence."""

FIELD_WIDTH = 160
"""Longest compact value shown per differing field."""

WORLD_KINDS = (
    Kind.MODEL_REQUEST, Kind.MODEL_STREAM_END, Kind.CLASSIFIER_REQUEST, Kind.TOOL_EXECUTED,
    Kind.TOOL_UNAVAILABLE, Kind.APPROVAL_PROMPT, Kind.UI_PUBLISH, Kind.FAILPOINT,
)
"""The kinds a view keeps (a ``failpoint`` only when its fault fired)."""

NORMALISED: tuple[tuple[str, str], ...] = (
    ("model_request.request_id, model_stream_end.request_id",
     "the implementation allocates request ids (any fresh string): renamed request#1, #2... "
     "by first appearance"),
    ("approval_prompt.wait_id",
     "the implementation allocates wait ids (any string unique in its store): renamed "
     "wait#1, #2... by first appearance"),
    ("model_request.messages[role=tool].content, approval_prompt.reason, "
     "ui_publish.projection.reason",
     f"the implementation's wording: {WORDING} (kept with exact_text)"),
    ("model_request.tools, ui_publish.projection.recovery_actions",
     "sets the contract gives no order: sorted"),
    ("model_request.instance", "a copy of the event's instance: dropped from the data"),
    ("failpoint", "kept only when its fault fired: name, hit, action, params (the "
     "implementation's context dropped)"),
)
"""Field → what the view does to it and why (also the report's explanation)."""


@dataclass(frozen=True, slots=True)
class WorldEvent:
    """One observation of the world, normalised. Two events are the same observation when
    their ``kind``, ``instance`` and ``data`` are equal (:meth:`key`); ``position`` (its place
    in the view) and ``trace_index`` (its place in its trace) only say where it was."""

    position: int
    trace_index: int
    kind: str
    instance: int
    data: dict[str, Any]

    def key(self) -> str:
        return canonical_json({"kind": self.kind, "instance": self.instance, "data": self.data})

    def line(self, width: int | None = DEFAULT_WIDTH, marker: str = " ") -> str:
        """The event as the trace renders it (:func:`harness.trace.lines.render_event`),
        numbered by its position in the view, so both sides' lines line up."""
        return render_event(TraceEvent(self.position, Source.WORLD, self.kind, self.instance,
                                       self.data), width, marker)


@dataclass(frozen=True, slots=True)
class FieldDifference:
    path: str
    """``kind``, ``instance`` or a path into the data: ``messages[2].content``."""
    a: str
    """Side A's value as compact canonical JSON (cut to :data:`FIELD_WIDTH`), or
    ``(absent)``."""
    b: str


@dataclass(frozen=True, slots=True)
class WorldDivergence:
    position: int
    """Where in the views the first difference is (0-based)."""
    a: WorldEvent | None
    """Side A's event there; None: A's view ended before it."""
    b: WorldEvent | None
    fields: tuple[FieldDifference, ...]
    """What differs (at most :data:`MAX_FIELDS`); empty when one side ended."""
    before: tuple[WorldEvent, ...]
    """Up to :data:`CONTEXT` events before it (equal on both sides; side A's)."""
    after_a: tuple[WorldEvent, ...]
    after_b: tuple[WorldEvent, ...]


def world_view(trace: Trace, *, exact_text: bool = False) -> tuple[WorldEvent, ...]:
    """The world's observations of ``trace``, normalised (see the module docstring)."""
    names = _Names()
    view: list[WorldEvent] = []
    for event in trace.events:
        if event.source != Source.WORLD or event.kind not in WORLD_KINDS:
            continue
        data = _normalised(event, names, exact_text)
        if data is None:
            continue
        view.append(WorldEvent(len(view), event.index, event.kind, event.instance, data))
    return tuple(view)


def first_world_divergence(a: Sequence[WorldEvent], b: Sequence[WorldEvent], *,
                           context: int = CONTEXT) -> WorldDivergence | None:
    """Where two views first part (see the module docstring); None when they are equal."""
    common = min(len(a), len(b))
    position = next((at for at in range(common) if a[at].key() != b[at].key()), None)
    if position is None:
        if len(a) == len(b):
            return None
        position = common
    mine = a[position] if position < len(a) else None
    theirs = b[position] if position < len(b) else None
    fields = differing_fields(mine, theirs) if mine is not None and theirs is not None else ()
    after = slice(position + 1, position + 1 + context)
    return WorldDivergence(position, mine, theirs, fields,
                           tuple(a[max(position - context, 0):position]), tuple(a[after]),
                           tuple(b[after]))


def differing_fields(a: WorldEvent, b: WorldEvent, limit: int = MAX_FIELDS
                     ) -> tuple[FieldDifference, ...]:
    """The fields where two events differ, in order (``kind`` alone when the kinds differ:
    the data of two kinds are not comparable)."""
    if a.kind != b.kind:
        return (_difference("kind", a.kind, b.kind),)
    out: list[FieldDifference] = []
    if a.instance != b.instance:
        out.append(_difference("instance", a.instance, b.instance))
    _walk(a.data, b.data, "", out, limit)
    return tuple(out[:limit])


# --------------------------------------------------------------------------- normalising


@dataclass(slots=True)
class _Names:
    """Implementation-allocated ids renamed by order of first appearance, per namespace."""

    seen: dict[tuple[str, str], str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def name(self, namespace: str, value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value  # an empty or odd id stays visible as it is
        key = (namespace, value)
        if key not in self.seen:
            self.counts[namespace] = self.counts.get(namespace, 0) + 1
            self.seen[key] = f"{namespace}#{self.counts[namespace]}"
        return self.seen[key]


def _normalised(event: TraceEvent, names: _Names, exact_text: bool) -> dict[str, Any] | None:
    data = dict(event.data)
    kind = event.kind
    if kind == Kind.FAILPOINT:
        if data.get("action", "none") == "none":
            return None
        return {"name": data.get("name"), "hit": data.get("hit"), "action": data.get("action"),
                "params": data.get("params", {})}
    if kind == Kind.MODEL_REQUEST:
        data.pop("instance", None)
        data["request_id"] = names.name("request", data.get("request_id"))
        if isinstance(data.get("tools"), list):
            data["tools"] = sorted(data["tools"], key=str)
        if not exact_text and isinstance(data.get("messages"), list):
            data["messages"] = [_message(m) for m in data["messages"]]
    elif kind == Kind.MODEL_STREAM_END:
        data["request_id"] = names.name("request", data.get("request_id"))
    elif kind == Kind.APPROVAL_PROMPT:
        data["wait_id"] = names.name("wait", data.get("wait_id"))
        if not exact_text and "reason" in data:
            data["reason"] = WORDING
    elif kind == Kind.UI_PUBLISH and isinstance(data.get("projection"), dict):
        projection = dict(data["projection"])
        if not exact_text and "reason" in projection:
            projection["reason"] = WORDING
        if isinstance(projection.get("recovery_actions"), list):
            projection["recovery_actions"] = sorted(projection["recovery_actions"], key=str)
        data["projection"] = projection
    return data


def _message(message: Any) -> Any:
    if isinstance(message, dict) and message.get("role") == "tool" and "content" in message:
        return {**message, "content": WORDING}
    return message


# --------------------------------------------------------------------------- differences


_ABSENT = object()


def _difference(path: str, a: Any, b: Any) -> FieldDifference:
    if isinstance(a, str) and isinstance(b, str):
        return FieldDifference(path, *_text_window(a, b))

    def shown(value: Any) -> str:
        return "(absent)" if value is _ABSENT else compact(value, FIELD_WIDTH)

    return FieldDifference(path, shown(a), shown(b))


def _text_window(a: str, b: str) -> tuple[str, str]:
    """Two differing texts, each shown from a little before the first character where they
    differ (long texts, such as the classifier's raw bytes, often differ only at the end)."""
    if len(compact(a, None)) <= FIELD_WIDTH and len(compact(b, None)) <= FIELD_WIDTH:
        return compact(a, None), compact(b, None)
    same = next((at for at, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(same - 40, 0)

    def shown(text: str) -> str:
        window = text[start:start + FIELD_WIDTH // 2]
        return (("…" if start else "") + compact(window, None)
                + ("…" if start + len(window) < len(text) else "")
                + f" ({len(text)} characters, from character {start})")

    return shown(a), shown(b)


def _walk(a: Any, b: Any, path: str, out: list[FieldDifference], limit: int) -> None:
    if len(out) >= limit:
        return
    if a is _ABSENT or b is _ABSENT:
        out.append(_difference(path, a, b))
        return
    if canonical_json(a) == canonical_json(b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            _walk(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{path}.{key}" if path else key,
                  out, limit)
        return
    if isinstance(a, list) and isinstance(b, list):
        for at in range(min(len(a), len(b))):
            _walk(a[at], b[at], f"{path}[{at}]", out, limit)
        if len(a) != len(b) and len(out) < limit:
            at = min(len(a), len(b))
            out.append(_difference(f"{path}[{at}:]", a[at:], b[at:]))
        return
    out.append(_difference(path or "data", a, b))
