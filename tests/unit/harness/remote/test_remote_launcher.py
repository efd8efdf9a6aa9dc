"""process:COMMAND end to end: the reference as a child process, real SIGKILL crashes, and
children that exit, babble or hang becoming reported scenario errors that name the command."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import jsonschema
import pytest

import reference_impl
from harness.contract.errors import ImplementationLoadError
from harness.implementations.specs import resolve
from harness.remote import launcher
from harness.remote.launcher import ProcessImplementation
from harness.remote.protocol import RemoteException
from harness.running.runner import run_scenario
from harness.scenarios.loader import load
from harness.running.suite import run_suite
from harness.trace.record import Kind, trace_to_json
from remote_recording import Recording

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[4]
SCHEMA = json.loads((ROOT / "fixtures" / "protocol.schema.json").read_text(encoding="utf-8"))
CRASH = load(ROOT / "scenarios/l4/crash_after_result_saved.toml")
OLD_CHECKPOINTS = load(ROOT / "scenarios/l1/old_checkpoints.toml")
SERVER = [sys.executable, "-m", "reference_impl.remote"]
REFERENCE_INFO = reference_impl.implementation().info

# A reference server with hooks, to misbehave on purpose (LH_TEST_MODE) or to show which
# ``finally:`` blocks ran (LH_TEST_MARK).
WRAPPER = '''
import os, sys, time
from reference_impl import implementation
from reference_impl.remote import serve

class World:
    def __init__(self, world):
        self._world = world
    def __getattr__(self, name):
        return getattr(self._world, name)
    def failpoint(self, name, context):
        try:
            self._world.failpoint(name, context)
        finally:
            if os.environ.get("LH_TEST_MARK"):
                with open(os.environ["LH_TEST_MARK"], "a") as mark:
                    mark.write(str(getattr(name, "value", name)) + "\\n")

class Runtime:
    def __init__(self, runtime):
        self._runtime = runtime
    def __getattr__(self, name):
        return getattr(self._runtime, name)
    def run_turn(self, session_id, text):
        mode = os.environ.get("LH_TEST_MODE", "")
        if mode == "die-in-turn":
            sys.stderr.write("fatal: out of cheese\\n")
            sys.stderr.flush()
            os._exit(5)
        if mode == "hang-in-turn":
            time.sleep(120)
        return self._runtime.run_turn(session_id, text)

class Impl:
    def __init__(self):
        self._impl = implementation()
        self.info = self._impl.info
    def open(self, data_dir, world):
        return Runtime(self._impl.open(data_dir, World(world)))
    def inspect(self, data_dir):
        return self._impl.inspect(data_dir)

def make():
    return Impl()

if __name__ == "__main__":
    sys.exit(serve(Impl(), sys.stdin.buffer, sys.stdout.buffer))
'''


@pytest.fixture(scope="module")
def remote():
    with Recording(SERVER) as implementation:
        yield implementation


@pytest.fixture(scope="module")
def wrapper(tmp_path_factory):
    path = tmp_path_factory.mktemp("wrapper") / "lh_wrapped_reference.py"
    path.write_text(WRAPPER, encoding="utf-8")
    return path


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def _normalized(trace) -> dict:
    data = trace_to_json(trace)
    data["meta"]["crash_mode"] = "*"
    for event in data["events"]:
        if event["kind"] == Kind.CRASH:
            event["data"]["mode"] = "*"
    return data


# --------------------------------------------------------------------------- the reference


def test_the_reference_as_a_process_gives_the_in_process_trace_and_verdicts(remote, monkeypatch):
    lines = []
    read, write = launcher._PipeTransport.read_line, launcher._PipeTransport.write_line

    def reading(self, timeout):
        line = read(self, timeout)
        lines.append((self, "in", line))
        return line

    def writing(self, data):
        lines.append((self, "out", data))
        write(self, data)

    monkeypatch.setattr(launcher._PipeTransport, "read_line", reading)
    monkeypatch.setattr(launcher._PipeTransport, "write_line", writing)
    runs = {}

    def runner(name):
        def run(implementation, scenario, seed, **kwargs):
            runs[name, scenario.id] = run_scenario(implementation, scenario, seed, **kwargs)
            return runs[name, scenario.id]
        return run

    scenarios = [CRASH, OLD_CHECKPOINTS]
    in_process = run_suite(reference_impl.implementation(), scenarios, 3,
                           runner=runner("in_process"))
    as_process = run_suite(remote, scenarios, 3, runner=runner("process"),
                           impl_spec="process:" + shlex.join(SERVER))
    assert {c.id: c.status for c in as_process.criteria} == \
        {c.id: c.status for c in in_process.criteria}
    assert [s.status for s in as_process.scenarios] == ["passed", "passed"]
    for scenario in scenarios:
        mine, theirs = runs["process", scenario.id].trace, runs["in_process", scenario.id].trace
        assert mine.meta.crash_mode == "process" and theirs.meta.crash_mode == "in_process"
        assert _normalized(mine) == _normalized(theirs), scenario.id

    # Every line that crossed the pipes is a message of the schema; results match their
    # method's result schema (paired with the request by direction and id).
    validators = {}

    def validate(definition, value):
        if definition not in validators:
            schema = {**SCHEMA["$defs"][definition], "$defs": SCHEMA["$defs"]}
            validators[definition] = jsonschema.Draft202012Validator(schema)
        validators[definition].validate(value)

    asked = {}
    for pipe, direction, line in lines:
        if not line:
            continue
        message = json.loads(line)
        if "method" in message:  # the root's oneOf, one branch at a time (much faster)
            validate(f"request.{message['method']}", message)
            asked[pipe, direction, message["id"]] = message["method"]
        elif "result" in message:
            validate("Result", message)
            method = asked[pipe, ("out" if direction == "in" else "in"), message["id"]]
            validate(f"result.{method}", message["result"])
        else:
            validate("Error", message)
    assert {"initialize", "open", "run_turn", "recover", "load_checkpoint", "inspect_parts",
            "close", "shutdown", "failpoint", "execute_tool", "next_chunk"} <= set(asked.values())


def test_a_crash_is_a_real_sigkill_and_the_restarted_process_executes_nothing_again(remote):
    remote.children.clear()
    run = run_scenario(remote, CRASH, 0)
    assert run.error == "" and run.trace.completed
    crashed, restarted = remote.children
    assert crashed.popen.returncode == -signal.SIGKILL and crashed.killed
    assert _gone(crashed.pid)
    assert restarted.pid != crashed.pid
    assert [e.data["mode"] for e in run.trace.crashes()] == ["process"]
    assert len(run.trace.ledger()) == 1  # the write ran once, before the kill
    restarted.popen.wait(5)
    assert restarted.popen.returncode == 0  # closed and shut down in order


def test_a_killed_child_runs_no_finally_the_in_process_crash_does(wrapper, tmp_path, monkeypatch):
    process_mark, in_process_mark = tmp_path / "process.marks", tmp_path / "in_process.marks"
    argv = [sys.executable, str(wrapper)]
    with ProcessImplementation(argv, {"LH_TEST_MARK": str(process_mark)},
                               info=REFERENCE_INFO) as implementation:
        assert run_scenario(implementation, CRASH, 0).error == ""

    spec = importlib.util.spec_from_file_location("lh_wrapped_reference", wrapper)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("LH_TEST_MARK", str(in_process_mark))
    assert run_scenario(module.make(), CRASH, 0).error == ""

    process_marks = process_mark.read_text().split()
    in_process_marks = in_process_mark.read_text().split()
    # The in-process crash unwinds through the IUT's finally: blocks; the SIGKILL does not.
    assert "after_result_saved" in in_process_marks
    assert "after_result_saved" not in process_marks
    assert [m for m in in_process_marks if m != "after_result_saved"] == process_marks


def test_inspect_uses_one_persistent_inspector(remote, tmp_path):
    first = remote._inspectors[None].pid if None in remote._inspectors else None
    remote.inspect(str(tmp_path))
    pid = remote._inspectors[None].pid
    remote.inspect(str(tmp_path))
    assert remote._inspectors[None].pid == pid and first in (None, pid)


# --------------------------------------------------------------------------- broken children


def _broken(argv, **kwargs):
    implementation = ProcessImplementation(argv, info=REFERENCE_INFO, **kwargs)
    implementation.spares = 0
    return implementation


@pytest.mark.parametrize("case, code, says", [
    ("exits at startup",
     "import sys; sys.stderr.write('boom: no config file\\n'); sys.exit(3)",
     ["open on instance 0 raised RemoteError", "it exited with status 3",
      "stderr tail: boom: no config file", "'initialize'"]),
    ("prints garbage",
     "print('Starting my runtime v2...', flush=True); import time; time.sleep(60)",
     ["not a message of protocol version 1", "Starting my runtime v2...",
      "write logs to stderr", "it was killed by the harness with SIGKILL"]),
    ("hangs", "import time; time.sleep(60)",
     ["wrote nothing for 0.5s while 'initialize' awaited its response (hung?)",
      "it was killed by the harness with SIGKILL", "stderr tail: (empty)"]),
])
def test_a_broken_child_is_a_reported_scenario_error_naming_the_command(case, code, says):
    argv = [sys.executable, "-c", code]
    with _broken(argv, startup_timeout_s=0.5) as implementation:
        run = run_scenario(implementation, CRASH, 0, time_limit_s=10)
        suite = run_suite(implementation, [CRASH], 0, runner=lambda *a, **k: run)
    assert not run.trace.completed
    assert f"implementation process `{shlex.join(argv)}`" in run.error
    for text in says:
        assert text in run.error, case
    assert suite.scenarios[0].status == "error"
    assert not any(child.alive for child in list(launcher._LIVE)
                   if child.command == shlex.join(argv))


@pytest.mark.parametrize("mode, says", [
    ("die-in-turn", ["run_turn on instance 0 raised RemoteError", "it exited with status 5",
                     "closed its stdout while 'run_turn' awaited its response",
                     "stderr tail: fatal: out of cheese"]),
    ("hang-in-turn", ["wrote nothing for 1s while 'run_turn' awaited its response"]),
])
def test_a_child_that_dies_or_hangs_mid_call_is_reported(wrapper, mode, says):
    argv = [sys.executable, str(wrapper)]
    with _broken(argv, env={"LH_TEST_MODE": mode}, reply_timeout_s=1) as implementation:
        run = run_scenario(implementation, CRASH, 0, time_limit_s=10)
    assert not run.trace.completed
    assert shlex.join(argv) in run.error
    for text in says:
        assert text in run.error


def test_a_hang_past_the_runner_limit_leaves_no_child_behind(wrapper):
    implementation = _broken([sys.executable, str(wrapper)], env={"LH_TEST_MODE": "hang-in-turn"})
    opened = []
    original = implementation.open
    implementation.open = lambda data_dir, world: opened.append(original(data_dir, world)) \
        or opened[-1]
    with implementation:
        # 3 s: the handshake is bounded by the limit too, and a busy machine needs a second.
        run = run_scenario(implementation, CRASH, 0, time_limit_s=3)
        # The launcher's silence bound follows the limit (3/4 of it), so it reports first.
        assert "wrote nothing for 2.25s" in run.error
        child = opened[0]._child
        deadline = time.monotonic() + 5
        while child.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not child.alive and _gone(child.pid)  # the runner released the data dir


# --------------------------------------------------------------------------- --impl process:


def test_process_spec_resolves_with_a_handshake():
    implementation = resolve("process:" + shlex.join(SERVER))
    try:
        assert implementation.info == REFERENCE_INFO
        assert implementation.crash_mode == "process"
        # Fixtures come over the protocol: the harness reads no path the server names.
        declared = implementation.info.checkpoint_fixtures[0]
        fixture = implementation.checkpoint_fixture(declared)
        assert fixture.content == (Path(reference_impl.__file__).parent / declared).read_bytes()
        assert fixture.expected_messages
        with pytest.raises(RemoteException, match="no declared checkpoint fixture '/etc/passwd'"):
            implementation.checkpoint_fixture("/etc/passwd")
    finally:
        implementation.close()


@pytest.mark.parametrize("spec, says", [
    ("process:", "needs a command"),
    ("process:python -c 'unterminated", "cannot split the command"),
    ("process:/no/such/iut --serve", "cannot start the implementation command "
                                     "`/no/such/iut --serve`"),
    (f"process:{sys.executable} -c 'import sys; sys.exit(4)'",
     "it exited with status 4"),
])
def test_bad_process_specs_fail_to_load_with_a_clear_message(spec, says):
    with pytest.raises(ImplementationLoadError) as info:
        resolve(spec)
    assert says in str(info.value)


def test_a_forked_copy_never_kills_its_parents_children(remote, tmp_path):
    remote.inspect(str(tmp_path))
    inspector = remote._inspectors[None]
    pid = os.fork()
    if pid == 0:  # the child: pretend to own nothing, then leave without cleanup
        inspector.kill()
        remote.close()
        os._exit(0)
    os.waitpid(pid, 0)
    assert inspector.alive
    remote.inspect(str(tmp_path))
