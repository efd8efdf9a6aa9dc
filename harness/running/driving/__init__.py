"""The parts of one scenario run, split by concept; :mod:`harness.running.runner` composes them.

Dependencies point one way, each module only on those listed before it:

* :mod:`~harness.running.driving.state` — what the parts share: the event log, the errors, the live
  runtimes, the flags (hung, finished) and the concurrent turn's hold;
* :mod:`~harness.running.driving.calls` — a driver call in its own thread under the time limit,
  and how it ended (returned, raised, crashed, hung, held);
* :mod:`~harness.running.driving.hung_threads` — ending threads abandoned after a hang, and the
  taint a survivor leaves on its implementation;
* :mod:`~harness.running.driving.store_probe` — readings of the durable store (probes at
  failpoints, observations between steps), each checked against the contract;
* :mod:`~harness.running.driving.instances` — instances: open, drop (a crash), restart + recover,
  and closing what is left;
* :mod:`~harness.running.driving.world_hooks` — what the world asks of the run while an
  implementation runs: probes, re-entrant calls, the hold of a concurrent turn;
* :mod:`~harness.running.driving.steps` — the scenario's steps and their dispatch;
* :mod:`~harness.running.driving.recorded_trace` — the trace at the end: metadata, planned faults
  that did not happen, the data dir and memory addresses scrubbed.

None of them imports :mod:`harness.running.runner`, :mod:`harness.running.suite` or anything above them.
"""
