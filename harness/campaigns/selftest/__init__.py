"""Self-validation: mutants of the reference implementation and the kill matrix.

A gate is worth the bugs it catches. Each mutant reintroduces one defect into
``reference_impl`` (in-process, by patching) and names the criteria expected to catch it;
:func:`harness.campaigns.selftest.killmatrix.run_selftest` runs the suite on the reference and on
every mutant and reports which criteria killed which mutant.
"""
