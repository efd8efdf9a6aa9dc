"""The README's commands and its crash-and-recovery example stay true."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_crash_recovery_example_runs_and_prints_what_it_claims():
    section = README.split("## Crash and recovery through the contract", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "succeeded recorded"
    assert lines[1].startswith("('ex-")
    assert lines[2:] == ["succeeded projected", "1", "completed"]


def test_ci_runs_exactly_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command.strip() in ci.splitlines()
    assert '-eq 5' in ci  # "no tests collected" must not pass silently
