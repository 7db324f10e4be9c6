"""tools/under_load.py (`make test-under-load`, what CI runs): the command's exit code is
passed on, its output comes last, and the CPU-bound processes are gone when it returns."""
import os
import re
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "tools" / "under_load.py"


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), "--burners", "2", *command],
                          capture_output=True, text=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def test_the_commands_exit_code_and_last_line_are_its_own_and_the_burners_are_stopped():
    p = _run(sys.executable, "-c", "import sys; print('the last line'); sys.exit(3)")
    assert p.returncode == 3
    assert p.stdout.splitlines()[-1] == "the last line"
    pids = [int(x) for x in re.search(r"pids (\d+(?:, \d+)*)", p.stdout).group(1).split(", ")]
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids)


def test_a_passing_command_exits_0():
    assert _run(sys.executable, "-c", "pass").returncode == 0
