"""ocw/notebook/stop_button.py: the kernel's stop button, pressed while the kernel's main
thread is idle (the chat widget's work runs in a subshell), counts a stop for ocw
(ocw/conversation/stop.py) instead of being dropped; a terminal IPython is left alone;
`uninstall` gives the kernel back exactly the handler it had.

The kernel is a stand-in with ipykernel's one attribute this module touches
(`saved_sigint_handler`, the handler ipykernel puts back after each message): a real
ipykernel kernel cannot run inside the test process. The SIGINT itself is real."""
from __future__ import annotations

import os
import signal

from ocw.conversation import stop
from ocw.notebook import stop_button


class Kernel:
    def __init__(self, handler):
        self.saved_sigint_handler = handler  # an instance attribute, as ipykernel's


class Shell:
    def __init__(self, kernel):
        self.kernel = kernel


def kernel_shell(handler=signal.SIG_IGN):
    return Shell(Kernel(handler))


def test_a_real_sigint_in_the_idle_kernel_counts_one_stop():
    shell = kernel_shell()
    assert stop_button.install(shell) is True
    previous = signal.signal(signal.SIGINT, shell.kernel.saved_sigint_handler)  # what ipykernel puts back
    try:
        before = stop.count()
        os.kill(os.getpid(), signal.SIGINT)  # delivered to the main thread before kill returns to Python
        assert stop.count() == before + 1
    finally:
        signal.signal(signal.SIGINT, previous)
    stop_button.uninstall(shell)
    assert shell.kernel.saved_sigint_handler is signal.SIG_IGN


def test_installing_twice_keeps_the_kernels_own_handler_to_give_back():
    def kernels_own(signum, frame):
        pass

    shell = kernel_shell(kernels_own)
    assert stop_button.install(shell) and stop_button.install(shell)
    assert shell.kernel.saved_sigint_handler is not kernels_own
    stop_button.uninstall(shell)
    assert shell.kernel.saved_sigint_handler is kernels_own
    stop_button.uninstall(shell)  # a second uninstall changes nothing
    assert shell.kernel.saved_sigint_handler is kernels_own


def test_a_terminal_or_a_kernel_without_the_attribute_is_left_alone():
    class Terminal:  # a terminal IPython: no kernel
        pass

    class OldKernel:  # a kernel without ipykernel's saved handler
        pass

    class OldShell:
        kernel = OldKernel()

    for shell in (Terminal(), OldShell()):
        assert stop_button.install(shell) is False
        stop_button.uninstall(shell)
    assert not hasattr(OldShell.kernel, "saved_sigint_handler")


def test_uninstall_leaves_a_handler_someone_else_set():
    def someone_elses(signum, frame):
        pass

    shell = kernel_shell(someone_elses)  # never installed: ocw's handler is not there
    stop_button.uninstall(shell)
    assert shell.kernel.saved_sigint_handler is someone_elses

    stop_button.install(shell)
    shell.kernel.saved_sigint_handler = signal.default_int_handler  # replaced after ocw's install
    stop_button.uninstall(shell)
    assert shell.kernel.saved_sigint_handler is signal.default_int_handler
