"""A pytest plugin: IPython's exit operations run inside the session, before pytest's
closing line (tests/conftest.py imports it; tests/test_closing_line.py proves it).

Why: the tests share one InteractiveShell (the singleton). IPython registers its exit
operations — end the history session, reset the namespaces, remove temp files — with
`atexit`, so they run after pytest has printed its summary. The namespace reset drops
every object the tests' cells left there, and a destructor that fails then prints
"Exception ignored in: …" and a traceback *after* pytest's closing line, the line the CI
log reader reads. Running them in the session is not enough on its own: pytest's
unraisable-exception plugin keeps a destructor's failure and warns of it at unconfigure,
after the summary again. So they run here with a hook of ours that says each such
failure in one line, before the summary; unregistered from atexit, they do not run twice.
"""
from __future__ import annotations


def pytest_sessionfinish(session, exitstatus):
    """Run the singleton shell's exit operations now (unregistered from atexit), and
    collect what their destructors leave: pytest's own unraisable-exception plugin would
    hold a destructor's failure and warn of it at unconfigure — after the closing line.
    Each one is said here instead, one line, before the summary."""
    import atexit
    import gc
    import sys

    from IPython.core.interactiveshell import InteractiveShell

    if not InteractiveShell.initialized():
        return
    shell = InteractiveShell.instance()
    atexit.unregister(shell.atexit_operations)
    said: list[str] = []

    def say(u) -> None:  # sys.unraisablehook: a destructor (or a finalizer) raised
        where = getattr(u.object, "__qualname__", type(u.object).__name__)
        said.append(f"{u.exc_type.__name__}: {u.exc_value} (in {where})")

    previous, sys.unraisablehook = sys.unraisablehook, say
    try:
        shell.atexit_operations()
        gc.collect()  # what the namespace reset left in reference cycles goes now, not at exit
    except Exception as e:  # noqa: BLE001 - said in one line before the summary, not after it
        said.append(f"{type(e).__name__}: {e}")
    finally:
        sys.unraisablehook = previous
        # An exited shell has no history manager and runs no cell: a later session in this
        # process (mutmut runs pytest twice in one, the stats run then the clean run) must get
        # a fresh one, not this one (its cells failed on `assert self.history_manager`).
        InteractiveShell.clear_instance()
    for line in said:
        print(f"\nIPython's exit operations: {line}")
