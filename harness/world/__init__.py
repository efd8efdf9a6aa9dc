"""The simulated world the harness owns: clock, model, classifier, tools, approver, UI.

One module per concept; :class:`harness.world.world.SimWorld` composes them into the
:class:`harness.contract.World` an implementation under test talks to.
"""

from harness.world.world import NoHooks, SimWorld, WorldHooks, WorldPort

__all__ = ["NoHooks", "SimWorld", "WorldHooks", "WorldPort"]
