"""Running: one case against one implementation, and many cases as a suite.

Guarantees: a case runs in a world of its own, from one seed, and gives the same trace each
time (:mod:`~harness.running.runner` composes the parts in :mod:`~harness.running.driving`);
:func:`harness.running.suite.run_suite` judges every criterion over every case and returns a
serializable :class:`~harness.report.result.RunResult`, the same with ``--jobs N``
(:mod:`~harness.running.parallel`) as in one process, and the same when split into shards
(:mod:`~harness.running.shard`). Selection of a partial run (:mod:`~harness.running.selection`,
:mod:`~harness.running.keyword_selection`, :mod:`~harness.running.lastfailed`), the process clock
held at the world's time (:mod:`~harness.running.process_clock`) and the failing case's timeline
(:mod:`~harness.running.timeline`) live here too. Depends on the criteria, scenarios, world,
faults, trace and contract; never on campaigns or the command line. The modules are the face:
import what you use from them (this package imports nothing, so importing one part does not
load the suite).
"""
