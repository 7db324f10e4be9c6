"""The kernel's stop button reaches ocw's work in a kernel subshell (ocw/conversation/stop.py).

ipykernel ignores SIGINT while idle and, around each shell message it runs in turn,
installs Python's handler and then puts back the one it saved. A request JupyterLab
sends a widget runs in a subshell thread, with the main thread idle: the stop button's
SIGINT is ignored. `install` makes the handler ipykernel puts back ocw's: in an idle
main thread a SIGINT then counts a stop instead of being dropped, while a running cell
still gets its KeyboardInterrupt exactly as before (ipykernel's own handler during
the cell). `uninstall` gives the kernel back the handler it had.
"""
from __future__ import annotations

import signal

from ocw.conversation import stop


def _on_sigint(signum, frame) -> None:
    stop.request()


def install(shell) -> bool:
    kernel = getattr(shell, "kernel", None)
    if kernel is None or not hasattr(kernel, "saved_sigint_handler"):
        return False  # a terminal IPython: Ctrl+C reaches the main thread, where ocw runs
    if kernel.saved_sigint_handler is not _on_sigint:
        kernel._ocw_saved_sigint = kernel.saved_sigint_handler
        kernel.saved_sigint_handler = _on_sigint  # put back after this cell, and after each one
    return True


def uninstall(shell) -> None:
    kernel = getattr(shell, "kernel", None)
    if kernel is not None and getattr(kernel, "saved_sigint_handler", None) is _on_sigint:
        kernel.saved_sigint_handler = getattr(kernel, "_ocw_saved_sigint", signal.SIG_IGN)
