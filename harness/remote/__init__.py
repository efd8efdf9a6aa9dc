"""Out-of-process implementations under test: the wire protocol, a process launcher, docker.

* :mod:`harness.remote.protocol` — newline-delimited JSON-RPC 2.0 over stdio, both
  directions (``docs/protocol.md``). It imports only :mod:`harness.contract` and the standard
  library, so an implementation's own server may import it too (the reference's does).
* :mod:`harness.remote.launcher` — :class:`~harness.remote.launcher.ProcessImplementation`,
  the ``process:COMMAND`` form of ``--impl``: one child process per opened instance, crashes
  as real ``SIGKILL`` s.
* :mod:`harness.remote.docker` — the ``docker:IMAGE`` form (needs a Docker engine).
* :mod:`harness.remote.container_engine` — inspects, kills and removes the docker form's
  containers (by name or label) through the Docker SDK or the ``docker`` command.
* :mod:`harness.remote.schema` — generates ``fixtures/protocol.schema.json`` from the method
  tables.

This package module imports nothing, so importing the protocol stays cheap for a child.
"""
