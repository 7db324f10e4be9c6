"""Sharing a session with another database role: the rows the row policies read.

Row-level security (ocw/store/postgres/migrations.py, p002) lets a role see and change its
own sessions and those with a `session_shares` row naming it. These methods write and
read those rows, through the store's own transaction and connection (a mixin of
PostgresStore), so they are under the same policies as everything else: only a
session's owner can share it (the policy's check, said here first in words), and a
role learns of a share only when it is the grantee or the owner.
"""
from __future__ import annotations

from ocw.text.errors import InvalidArgument, StoreError


class Sharing:
    def share_session(self, sid: str, role: str, share: bool = True) -> bool:
        """Share session `sid` with database role `role` (or take it back): a row of
        `session_shares`, which the policies read. Only the session's owner may; the role
        must exist. Returns False when nothing changed (already shared, or not shared)."""
        with self._tx() as cur:
            self._locked_row(cur, sid)
            cur.execute("SELECT owner, name, current_user FROM sessions WHERE id = %s", [sid])
            owner, name, me = cur.fetchone()
            if owner != me:
                raise StoreError(f"session {name!r} is shared with you by {owner}; only its owner shares it",
                                 hint=f"ask {owner}, or copy what you need into a session of your own")
            if role == me:
                raise InvalidArgument(f"session {name!r} is yours ({me}) already; name another database role")
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
            if cur.fetchone() is None:
                raise InvalidArgument(f"there is no database role {role!r} in {self.describe()}",
                                      hint="name a role that logs in to this database (its user name)")
            if share:
                cur.execute("INSERT INTO session_shares (session_id, grantee) VALUES (%s, %s)"
                            " ON CONFLICT DO NOTHING RETURNING 1", [sid, role])
            else:
                cur.execute("DELETE FROM session_shares WHERE session_id = %s AND grantee = %s RETURNING 1",
                            [sid, role])
            return cur.fetchone() is not None

    def shares(self, sid: str) -> dict:
        """{"owner": role, "grantees": [roles]} — who the session belongs to and is shared
        with, as far as this role may see (a grantee sees itself, not the others)."""
        with self._read() as cur:
            cur.execute("SELECT owner FROM sessions WHERE id = %s", [sid])
            r = cur.fetchone()
            cur.execute("SELECT grantee FROM session_shares WHERE session_id = %s ORDER BY grantee", [sid])
            return {"owner": r[0] if r else None, "grantees": [g for (g,) in cur.fetchall()]}

