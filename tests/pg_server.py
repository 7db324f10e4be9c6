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


# What a turn of an ocw before schema p005 sent after its commit: a NOTIFY every time.
# Tests that write through an older schema (MIGRATIONS cut short) patch it into
# ocw/store/postgres/append.py, whose NOTIFY calls p005's `ocw_watched`; it takes the
# same two parameters and reads neither.
OLD_NOTIFY_SQL = "SELECT pg_notify('ocw_sessions', ''), $1::text, $2::integer"
