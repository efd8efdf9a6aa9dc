"""Campaigns: many runs, chosen by the harness, judged by the criteria.

Guarantees: every campaign is deterministic per seed and reproducible case by case (each
failure is shrunk to a scenario file with its replay command). Modules:
:mod:`~harness.campaigns.chaos` (random fault schedules over the bundled scenarios),
:mod:`~harness.campaigns.sweep` (a crash at every reachable failpoint hit),
:mod:`~harness.campaigns.selftest` (mutants of the reference and the kill matrix),
:mod:`~harness.campaigns.matrix` and :mod:`~harness.campaigns.compare` (criterion x
implementation tables), :mod:`~harness.campaigns.merge` (shards joined into one report),
:mod:`~harness.campaigns.diff` (the same cases on two implementations, the first diverging
world event of each), :mod:`~harness.campaigns.executor` (where a campaign's cases run: the
local worker pool or a Dask cluster).
Campaigns sit above running and the implementations they choose; the command line sits above
them. The modules are the face (this package imports nothing).
"""
