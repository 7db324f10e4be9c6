"""The stop counter (ocw/conversation/stop.py): each press counted once, from any
thread; a check raises only for a press after the count it was given."""
from __future__ import annotations

import threading

import pytest

from ocw.conversation import stop


def test_each_stop_is_counted_once_from_any_thread():
    before = stop.count()
    stop.request()
    assert stop.count() == before + 1
    presses = [threading.Thread(target=stop.request) for _ in range(8)]
    for t in presses:
        t.start()
    for t in presses:
        t.join()
    assert stop.count() == before + 9


def test_a_check_raises_only_for_a_stop_after_its_start():
    started = stop.count()
    stop.check(started)  # nothing pressed since: no raise
    stop.check(stop.count())
    stop.request()
    with pytest.raises(KeyboardInterrupt, match="stopped"):
        stop.check(started)
    stop.check(stop.count())  # a press before this start is not for it


def test_a_fresh_process_has_counted_no_stop():
    """count() is the number of stops asked for in this process: 0 before the first press
    (what the first compaction of a fresh kernel notes), 1 after it — and a check against
    the fresh count raises only once a press came."""
    import os
    import subprocess
    import sys

    import ocw

    code = ("from ocw.conversation import stop\n"
            "print(stop.count()); stop.check(0); stop.request(); print(stop.count())\n"
            "try:\n    stop.check(0)\nexcept KeyboardInterrupt:\n    print('raised')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(ocw.__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "raised"]
