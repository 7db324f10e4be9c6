"""A throwaway PostgreSQL server in a temporary folder, for the tests and the benchmark.

`Cluster().start()` runs `initdb` and `pg_ctl start` from the machine's
PostgreSQL (Debian's `postgresql` package: /usr/lib/postgresql/N/bin), on a
free loopback port with its socket in the folder; `stop()` stops it and
removes the folder. Both programs refuse to run as root, so as root they run
as the `postgres` user (`runuser`), with the folder owned by it.
Authentication: the superuser `postgres` is trusted (socket and loopback);
every other role must give its password over TCP (scram-sha-256), so the
password tests are real. Anything that goes wrong raises ClusterError saying
what and why (the tests fail with it; they never skip).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile


class ClusterError(RuntimeError):
    pass


def bin_dir() -> str:
    """The folder with initdb and pg_ctl: PATH, else the newest /usr/lib/postgresql/N/bin."""
    found = shutil.which("pg_ctl")
    if found and os.path.exists(os.path.join(os.path.dirname(found), "initdb")):
        return os.path.dirname(found)
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]) if
                  d.split("/")[-2].isdigit() else 0)
    for d in reversed(dirs):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    raise ClusterError("no PostgreSQL server programs (initdb, pg_ctl) on this machine: "
                       "install Debian's postgresql package (apt-get install postgresql)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HBA = """\
local all postgres trust
local all all scram-sha-256
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
"""


class Cluster:
    def __init__(self, *, durable: bool = False):
        """`durable=False` (tests): fsync off, it is thrown away anyway. The
        benchmark keeps PostgreSQL's defaults (fsync, synchronous_commit on), the
        same durability as the DuckDB file it is compared with."""
        self.durable = durable
        self.folder: str | None = None
        self.port = 0
        self.bin = ""
        self._as_postgres: list[str] = []

    @property
    def socket_dir(self) -> str:
        return os.path.join(self.folder or "", "sock")

    def _run(self, *args: str, timeout: float = 120) -> str:
        cmd = [*self._as_postgres, *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.folder)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ClusterError(f"{os.path.basename(args[0])} failed: {e}") from None
        if done.returncode != 0:
            raise ClusterError(f"{os.path.basename(args[0])} failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-2000:]}")
        return done.stdout

    def start(self) -> "Cluster":
        self.bin = bin_dir()
        self.folder = tempfile.mkdtemp(prefix="ocw-pg-")
        data = os.path.join(self.folder, "data")
        os.mkdir(self.socket_dir)
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise ClusterError("running as root and there is no postgres user to run the server as") from None
            runuser = shutil.which("runuser")
            if runuser is None:
                raise ClusterError("running as root and runuser is missing (util-linux)")
            for path in (self.folder, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
            self._as_postgres = [runuser, "-u", "postgres", "--"]
        try:
            self._run(os.path.join(self.bin, "initdb"), "-D", data, "-U", "postgres", "-E", "UTF8", "--no-locale",
                      "-N", "--auth=trust")
            with open(os.path.join(data, "pg_hba.conf"), "w") as f:
                f.write(HBA)
            self.port = free_port()
            opts = (f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 -c max_connections=60"
                    " -c password_encryption=scram-sha-256")
            if not self.durable:
                opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            self._run(os.path.join(self.bin, "pg_ctl"), "-D", data, "-l", os.path.join(self.folder, "server.log"),
                      "-w", "-t", "60", "-o", opts, "start")
        except BaseException:
            log = self.log_tail()
            self.stop()
            if log:
                raise ClusterError(f"the PostgreSQL server did not start; its log ends:\n{log}") from None
            raise
        return self

    def log_tail(self, chars: int = 2000) -> str:
        try:
            with open(os.path.join(self.folder or "", "server.log")) as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def url(self, dbname: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def admin(self):
        import psycopg

        return psycopg.connect(self.url(), autocommit=True)

    def create_database(self, name: str) -> str:
        """A new empty database; returns the superuser's URL for it."""
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.folder is None:
            return
        data = os.path.join(self.folder, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            try:
                self._run(os.path.join(self.bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop", timeout=60)
            except ClusterError:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
