"""The virtual clock starts at a fixed instant and moves only when told to."""

import pytest

from harness.world.clock import EPOCH, VirtualClock


def test_starts_fixed_and_advances_only_explicitly():
    clock = VirtualClock()
    assert clock.now() == EPOCH == VirtualClock().now()
    assert clock.now() == clock.now()
    assert clock.advance(2.5) == EPOCH + 2.5 == clock.now()
    assert clock.advance(0) == EPOCH + 2.5


def test_never_goes_back():
    with pytest.raises(ValueError, match="cannot go back"):
        VirtualClock(10.0).advance(-1)
