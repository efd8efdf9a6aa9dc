"""A model request's messages may be a read-only sequence (a runtime's view of its log): the
world reads it once, into a tuple, and bounds what it reads; a list, text or a sequence that
cannot be read is refused with the port and instance named."""

import collections.abc
import random

import pytest

from harness import contract as c
from harness.trace.record import Kind
from harness.world import SimWorld
from harness.world import world as world_module
from harness.world.model import ScriptedResponse

SESSION = c.SessionConfig("s1", tools=(c.ToolSpec("write_file", c.ToolKind.WRITE),))
HELLO = c.Message("user", "hello")


class Reads:
    """A read-only sequence that counts how often it is iterated and may change afterwards
    (what a runtime's log view does once the log grows: the world must not read it late)."""

    def __init__(self, items, length=None):
        self.items, self.length, self.iterations = list(items), length, 0

    def __len__(self):
        return len(self.items) if self.length is None else self.length

    def __getitem__(self, index):
        if self.length is not None:  # a sequence that does not end
            if index >= self.length:
                raise IndexError(index)
            return HELLO
        return self.items[index]

    def __iter__(self):
        self.iterations += 1
        if self.length is not None:
            return (HELLO for _ in range(self.length))
        return iter(list(self.items))


collections.abc.Sequence.register(Reads)


def _world():
    return SimWorld(rng=random.Random(1), sessions=(SESSION,),
                    model=[ScriptedResponse("s1", "hi")])


def test_a_view_is_read_once_and_the_model_and_the_trace_see_that_reading():
    world = _world()
    view = Reads([HELLO])
    stream = world.port(0).open_model_stream(c.ModelRequest("r1", "s1", view, ()))
    view.items.append(c.Message("user", "added after the request"))  # the log grew later
    assert stream.next_chunk().text == "hi" and view.iterations == 1
    (request,) = [e for e in world.log.events() if e.kind is Kind.MODEL_REQUEST]
    assert request.data["messages"] == [c.to_json(HELLO)]


def test_a_sequence_that_does_not_end_is_refused_at_the_bound(monkeypatch):
    monkeypatch.setattr(world_module, "MODEL_REQUEST_MESSAGES_MAX", 50)
    world = _world()
    with pytest.raises(c.ContractError, match=r"more than 50 messages \(instance 0\)"):
        world.port(0).open_model_stream(c.ModelRequest("r1", "s1", Reads([], length=10**12), ()))
    assert world.take_foreign_calls() == [
        "world port open_model_stream was called with a ModelRequest of more than 50 messages"
        " (instance 0)"]


def test_a_sequence_that_cannot_be_read_and_a_list_are_refused():
    class Broken(Reads):
        def __iter__(self):
            raise RuntimeError("log closed")

    world = _world()
    with pytest.raises(c.ContractError, match="could not be read: RuntimeError: log closed"):
        world.port(0).open_model_stream(c.ModelRequest("r1", "s1", Broken([HELLO]), ()))
    with pytest.raises(c.ContractError, match="whose messages is list, expected a read-only"):
        world.port(0).open_model_stream(c.ModelRequest("r1", "s1", [HELLO], ()))
    assert not [e for e in world.log.events() if e.kind is Kind.MODEL_REQUEST]


def test_what_is_not_a_model_request_is_refused_as_one():
    world = _world()
    with pytest.raises(c.ContractError, match="open_model_stream was called with str"):
        world.port(0).open_model_stream("hello")
