"""Which front end runs this kernel, and the two things that follow from it: whether
replies may stream as display updates, and which session a cell continues.

The kernel is never told its front end, so it reads the traces each one leaves:

- JupyterLab and Notebook 7 start the kernel with `JPY_SESSION_NAME` (the notebook's
  path); VS Code puts `__vsc_ipynb_file__` in the user namespace. Interactive: the
  notebook's conversation resumes, and display updates render.
- Voilà, papermill, `jupyter nbconvert --execute`, `jupyter execute` (nbclient) and
  `jupyter console` start the kernel as a child of their own process; its command
  line names them (and the notebook). Voilà also sets `SERVER_SOFTWARE=voila/…`.
- Anything else in a kernel is treated as a notebook whose name is unknown ("default").

Why per front end: `jupyter console` drops `update_display_data`, so a streamed reply
would stop at its first words — there it streams as text. A batch run must not
continue yesterday's run at 60 %, so each run gets a session of its own (named after
the notebook and the run's time). Voilà serves one notebook to many visitors, each with
a kernel of their own: each kernel gets its own session, so no visitor sees another's.
A name given by the notebook (`%%chat --session`) or by `OCW_SESSION` wins everywhere.

`detect` is pure (environment, namespace, ancestors' command lines in); `ancestors`
does the reading, from /proc (elsewhere it finds nothing and the kernel is "kernel").
"""
from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

# Front ends by the program that started the kernel: (kind, words that name it).
LAUNCHERS = (
    ("voila", ("voila",)),
    ("batch", ("papermill", "jupyter-nbconvert", "nbconvert", "jupyter-execute", "nbclient")),
    ("console", ("jupyter-console", "jupyter_console")),
)
KINDS = ("notebook", "vscode", "voila", "batch", "console", "kernel", "terminal")


@dataclass(frozen=True)
class Frontend:
    kind: str  # one of KINDS
    notebook: str = ""  # the notebook's path where the front end says it, else ""
    token: str = ""  # what tells this kernel's run apart (a batch run's time, a Voilà kernel's id)

    @property
    def updates(self) -> bool:
        """Does it render `update_display_data`? jupyter console (and a terminal) do not."""
        return self.kind not in ("console", "terminal")

    def session_name(self, environ=None) -> str:
        """The session a cell continues when it names none."""
        env = os.environ if environ is None else environ
        named = env.get("OCW_SESSION", "").strip()
        if named:
            return named
        if self.kind in ("notebook", "vscode") and self.notebook:
            return self.notebook
        if self.kind in ("batch", "voila"):
            stem = Path(self.notebook).stem if self.notebook else "notebook"
            return f"{stem} ({'Voilà' if self.kind == 'voila' else 'run'} {self.token})"
        return "default"


def program_words(cmdline: list[str]) -> list[str]:
    """What names the program of a command line: its file, the script or module a Python
    runs (`python -m papermill`, `python …/jupyter-console`), and `jupyter-<sub>` for
    `jupyter <sub>` (before jupyter execs jupyter-<sub>)."""
    if not cmdline:
        return []
    words = [Path(cmdline[0]).name.lower()]
    rest = cmdline[1:]
    if words[0].startswith("python") and rest:
        words.append(rest[1].lower() if rest[0] == "-m" and len(rest) > 1 else Path(rest[0]).name.lower())
    elif words[0] == "jupyter" and rest and not rest[0].startswith("-"):
        words.append(f"jupyter-{rest[0].lower()}")
    return words


VALUE_OPTIONS = ("--output", "-o", "--output-dir", "--output_dir")  # their value is not the input


def _notebook_arg(cmdline: list[str]) -> str:
    """The notebook a launcher runs: its first .ipynb argument that is not an option's
    value (`nbconvert --output out.ipynb in.ipynb`; papermill's input comes first)."""
    return next((a for i, a in enumerate(cmdline) if i and a.endswith(".ipynb")
                 and cmdline[i - 1] not in VALUE_OPTIONS and not a.startswith("--")), "")


def detect(*, environ, user_ns=None, ancestors=(), zmq: bool = True, now: _dt.datetime | None = None,
           kernel_id: str = "") -> Frontend:
    """The front end from its traces (see the module's docstring), nearest launcher first."""
    path = environ.get("JPY_SESSION_NAME", "").strip()
    if path:
        return Frontend("notebook", path)
    vsc = (user_ns or {}).get("__vsc_ipynb_file__")
    if isinstance(vsc, str) and vsc.strip():
        return Frontend("vscode", vsc.strip())
    if not zmq:
        return Frontend("terminal")
    stamp = (now or _dt.datetime.now()).strftime("%Y-%m-%d %H:%M:%S")
    if environ.get("SERVER_SOFTWARE", "").lower().startswith("voila"):
        nb = next((_notebook_arg(c) for c in ancestors if _notebook_arg(c)), "")
        return Frontend("voila", nb, kernel_id or stamp)
    for cmdline in ancestors:
        words = program_words(cmdline)
        for kind, names in LAUNCHERS:
            if any(w in names or w.startswith(tuple(n + "." for n in names)) for w in words):
                nb = _notebook_arg(cmdline)
                # A batch run: its time, and the kernel's id so two runs in one second differ.
                return Frontend(kind, nb, (kernel_id or stamp) if kind == "voila"
                                else " · ".join(x for x in (stamp, kernel_id) if x))
    return Frontend("kernel")


def ancestors(depth: int = 3) -> list[list[str]]:
    """The command lines of this process's parent, grandparent, … (Linux /proc; else [])."""
    out, pid = [], os.getppid()
    for _ in range(depth):
        if pid <= 1:
            break
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        out.append([a for a in raw.decode("utf-8", "replace").split("\0") if a])
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the (comm) that may hold spaces
    return out


def kernel_id() -> str:
    """This kernel's id as Jupyter named its connection file (kernel-<id>.json), short."""
    try:
        from ipykernel.connect import get_connection_file

        stem = Path(get_connection_file()).stem
    except Exception:  # not in a kernel, or an ipykernel without it: the run's time serves
        return ""
    return stem.removeprefix("kernel-")[:8]


def current(shell) -> Frontend:
    """This kernel's front end, read once per Runtime (a batch run's time must not move)."""
    zmq = type(shell).__name__ == "ZMQInteractiveShell" if shell is not None else False
    return detect(environ=os.environ, user_ns=getattr(shell, "user_ns", None), ancestors=ancestors() if zmq else (),
                  zmq=zmq, kernel_id=kernel_id() if zmq else "")
