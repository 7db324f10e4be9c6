"""Fixtures for the PostgreSQL store: a real server the tests start themselves.

`pg_cluster` (once per test run) runs initdb + pg_ctl in a temporary folder
(ocw/store/postgres/cluster.py) and stops it at the end; `pg_url` is a fresh empty
database on it for one test. If the server cannot start, every test that
needs it FAILS with the reason — it never skips (CI installs PostgreSQL).
"""
from __future__ import annotations

import itertools

import pytest

_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg_cluster():
    from ocw.store.postgres.cluster import Cluster, ClusterError

    cluster = Cluster()
    try:
        cluster.start()
    except ClusterError as e:
        pytest.fail(f"the PostgreSQL test server could not start: {e}", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster):
    """The URL of a new, empty database (superuser, no password) for this test."""
    return pg_cluster.create_database(f"ocw_t{next(_names)}")


# What a turn of an ocw before schema p005 did to tell other kernels: NOTIFY every
# listener, every time (p004 sent it after the commit; here in the transaction, which
# listeners see alike). Tests that write through an older schema (MIGRATIONS cut short)
# patch it into ocw/store/postgres/append.py, whose HEAD statement calls p008's
# `ocw_tell` otherwise; it takes the same two parameters.
OLD_TELL_SQL = "(SELECT $1::text IS NOT NULL OR $2::integer IS NOT NULL FROM pg_notify('ocw_sessions', ''))"


@pytest.fixture
def bouncer_url(pg_cluster):
    """A fresh database behind PgBouncer in TRANSACTION pooling (each transaction gets
    whichever of 2 server connections is free): the URL clients use. PgBouncer missing
    FAILS the test with how to install it (CI installs it: .ci/run)."""
    import os
    import shutil
    import socket
    import subprocess
    import tempfile
    import time
    from pathlib import Path

    from ocw.store.postgres.cluster import free_port

    exe = shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
                                              if os.path.exists(p)), None)
    if exe is None:
        pytest.fail("PgBouncer is not installed (apt-get install pgbouncer)", pytrace=False)
    name = f"ocw_b{next(_names)}"
    pg_cluster.create_database(name)
    # Run as root, PgBouncer drops to `nobody`, who must reach and write its folder: one
    # directly in the temp dir (pytest's own folders are the user's alone).
    folder = Path(tempfile.mkdtemp(prefix="ocw-pgbouncer-"))
    os.chmod(folder, 0o777)
    port = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n{name} = host=127.0.0.1 port={pg_cluster.port} dbname={name} user=postgres\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nauth_type = trust\n"
        f"auth_file = {folder}/users.txt\npool_mode = transaction\ndefault_pool_size = 2\n"
        f"max_client_conn = 100\nlogfile = {folder}/pgbouncer.log\npidfile = {folder}/pgbouncer.pid\n"
        "unix_socket_dir =\n")
    argv = [exe] + (["-u", "nobody"] if os.geteuid() == 0 else []) + [str(folder / "pgbouncer.ini")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (folder / "pgbouncer.log").read_text() if (folder / "pgbouncer.log").exists() else ""
                proc.kill()
                pytest.fail(f"PgBouncer did not start: {proc.stdout.read().decode(errors='replace')}{log}",
                            pytrace=False)
            time.sleep(0.05)
    yield f"postgresql://postgres@127.0.0.1:{port}/{name}"
    proc.terminate()
    proc.wait(10)
    shutil.rmtree(folder, ignore_errors=True)
