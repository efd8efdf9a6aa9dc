"""benchmarks/bench_tests.py: the CPU it reports includes descendants whose parent left them.

Checked in a separate process: being a subreaper is a property of the whole process, which a
pytest worker must not take on for the tests after this one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# A child that starts a grandchild burning about 0.3 s of CPU and exits without waiting for
# it; the grandchild writes its own CPU time when done.
PROBE = """
import json, os, subprocess, sys, time
sys.path.insert(0, {benchmarks!r})
import bench_tests

subreaper = bench_tests._become_subreaper() if {adopt} else False
burn = "import os, time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass\\n" \\
       "t = os.times()\\nopen({burned!r}, 'w').write(str(t.user + t.system))"
child = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1]])"
before = bench_tests._children_cpu_s()
process = subprocess.Popen([sys.executable, "-c", child, burn])
adopted = bench_tests._wait_reaping(process)
while not os.path.exists({burned!r}) or not open({burned!r}).read():
    time.sleep(0.05)  # unadopted: the grandchild finishes on its own
print(json.dumps({{"subreaper": subreaper, "adopted": adopted, "returncode": process.returncode,
                  "counted_s": bench_tests._children_cpu_s() - before}}))
"""


def _probe(tmp_path: Path, adopt: bool) -> tuple[dict, float]:
    burned = tmp_path / f"burned-{adopt}"
    code = PROBE.format(benchmarks=str(ROOT / "benchmarks"), burned=str(burned), adopt=adopt)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), float(burned.read_text())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER")
def test_an_orphaned_grandchild_s_cpu_is_counted_once_adopted(tmp_path):
    seen, burned_s = _probe(tmp_path, adopt=True)
    assert seen["subreaper"] and seen["adopted"] == 1 and seen["returncode"] == 0
    assert burned_s >= 0.3 and seen["counted_s"] >= burned_s
    # the same without adoption: the grandchild's CPU is not in the count
    unseen, burned_s = _probe(tmp_path, adopt=False)
    assert unseen["adopted"] == 0 and unseen["counted_s"] < burned_s
