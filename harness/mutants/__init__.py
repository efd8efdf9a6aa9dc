"""Mutants: the reference implementation with one defect reintroduced, each named for its defect.

Guarantees: a mutant is a small text edit of ``reference_impl``
(:mod:`~harness.mutants.source_patch`) applied in a fresh module namespace, never to the
reference itself; each names the criteria expected to catch it
(:data:`harness.mutants.catalogue.MUTANTS`). They are implementations under test
(``--impl mutant:NAME``); the self-test campaign (:mod:`harness.campaigns.selftest`) runs them.
The modules are the face (this package imports nothing).
"""
