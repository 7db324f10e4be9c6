"""The `ocw` command: move sessions between a DuckDB file and a PostgreSQL database.

    ocw export --to postgresql://me@db.team/ocw [--from FILE] [--session NAME ...]
    ocw import --from postgresql://me@db.team/ocw [--to FILE] [--session NAME ...]
    ocw db init postgresql://admin@db.team/ocw [--grant ROLE ...] [--schema NAME]
    ocw db grant postgresql://admin@db.team/ocw ROLE [ROLE ...] [--schema NAME]

`export` copies out of your ocw database (OCW_DB, else the default file) unless
`--from` names another; `import` copies into it unless `--to` does. Both are
the same idempotent copy (ocw/store/transfer.py): running one twice changes nothing.
One line per session, then a count; a session that could not be copied is
said why, and the exit status is 1. Bad arguments or a store that cannot be
opened: one line on stderr, exit status 2. A URL's password is never printed.

`db init` sets up the team database (ocw/store/postgres/roles.py): ocw's schema,
owned by a role of its own, with row-level security; `--grant` and `db grant`
give a user's role what it needs. Both are idempotent; one line per change.
"""
from __future__ import annotations

import argparse
import re
import os
import sys

from ocw.text.errors import OcwError, StoreError
from ocw.text.secrets import mask_credentials

SIDE_FILES = ("", ".wal", ".ocw-lock")  # what opening a DuckDB file may create beside it


def _is_file(where: str) -> bool:
    from ocw.store.postgres import url as pg_url

    return not pg_url.is_url(where) and where != ":memory:"


def _check_source(where: str) -> None:
    """A source is read, never written: it must already be an ocw database at this
    ocw's schema (an empty file would be made one; an earlier ocw's file would be
    migrated; a newer one's is refused as the magics refuse it). Read-only looks only."""
    from ocw.store.duckdb import migrations, ownership

    path = ownership.check_path(where)
    if not os.path.exists(path):
        raise StoreError(f"there is no ocw database at {where}", hint="check the path (--from)")
    claim = ownership.classify_file(path) if os.path.getsize(path) else ownership.Claim("new", 0)
    if claim is None:
        return  # held by a kernel right now: the store checks again as it opens it
    if claim.kind == "new":
        raise StoreError(f"{where} holds no ocw sessions (an empty database); nothing to copy, and it is left as it is",
                         hint="check the path (--from)")
    if claim.version < migrations.SCHEMA_VERSION:
        raise StoreError(f"{where} was written by an earlier ocw (schema {claim.version}); a copy never writes its "
                         "source, and reading it needs an upgrade", hint="open it once with this ocw (%config Ocw.db "
                         "or OCW_DB), which upgrades it, then copy")


def _open(where: str):
    from ocw.conversation.sessions import open_backend

    return open_backend(where)


def _default() -> str:
    from ocw.store.paths import default_db_path

    return default_db_path()


def _one_line(text: str) -> str:
    """What the command prints of an error: one line, no `user:password@`."""
    return " ".join(mask_credentials(str(text)).split())


def _created(where: str) -> list[str]:
    """The files a new DuckDB destination would be (so a failed copy can take them back)."""
    if not _is_file(where):
        return []
    path = os.path.expanduser(where)
    return [path + side for side in SIDE_FILES if not os.path.lexists(path + side)]


class _Parser(argparse.ArgumentParser):
    """A mistyped command is one line on stderr (exit status 2), as every other failure."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {_one_line(message)} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ocw", description="Move ocw sessions between a DuckDB file and a PostgreSQL "
                                "database (postgresql://user@host/database). Copies are idempotent.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, text in (("export", "copy sessions out of your ocw database (or --from) into --to"),
                       ("import", "copy sessions from --from into your ocw database (or --to)")):
        c = sub.add_parser(name, help=text, description=text)
        c.add_argument("--from", dest="source", required=name == "import", metavar="DB",
                       help="where the sessions are: a DuckDB file or a postgresql:// URL"
                            + ("" if name == "import" else " (default: OCW_DB or the default file)"))
        c.add_argument("--to", dest="dest", required=name == "export", metavar="DB",
                       help="where they go: a DuckDB file (created if new) or a postgresql:// URL"
                            + ("" if name == "export" else " (default: OCW_DB or the default file)"))
        c.add_argument("--session", action="append", metavar="NAME",
                       help="a session's name or id (repeat for more; default: every session)")
    db = sub.add_parser("db", help="set up the team database on PostgreSQL (row-level security)",
                        description="set up the team database on PostgreSQL (row-level security)")
    dbsub = db.add_subparsers(dest="db_command", required=True)
    init = dbsub.add_parser("init", help="create ocw's schema, owned by the role ocw_owner, and grant roles",
                            description="create ocw's schema, owned by the role ocw_owner, and grant roles; "
                                        "run as a role that may create roles and schemas")
    init.add_argument("url", metavar="URL", help="postgresql://ADMIN@host/database")
    init.add_argument("--grant", action="append", default=[], metavar="ROLE",
                      help="a login role that uses ocw (repeat for more)")
    grant = dbsub.add_parser("grant", help="let login roles use the team database",
                             description="let login roles use the team database (each sees only its own sessions "
                                         "and those shared with it)")
    grant.add_argument("url", metavar="URL", help="postgresql://ADMIN@host/database")
    grant.add_argument("roles", nargs="+", metavar="ROLE")
    for c in (init, grant):
        c.add_argument("--schema", default="ocw", metavar="NAME", help="the schema ocw's tables live in (default: ocw)")
    return p


def db_main(args) -> int:
    """`ocw db init|grant`: one line per change, or one line on stderr (exit status 2)."""
    from ocw.store.postgres import roles
    from ocw.store.postgres import url as pg_url
    from ocw.store.postgres.conn import CONNECT_TIMEOUT, driver, one_line, store_error

    doing = f"ocw db {args.db_command}"
    conn = None
    try:
        url = pg_url.checked(args.url)
        where = pg_url.display(url)
        psycopg = driver()
        try:
            conn = psycopg.connect(pg_url.connect_url(url), autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                   application_name="ocw db")
            if args.db_command == "init":
                said = roles.init(conn, where, schema=args.schema, grant=args.grant)
            else:
                said = roles.grant(conn, where, args.roles, schema=args.schema)
        except psycopg.Error as e:
            text = one_line(e, pg_url.secrets_of(url))
            if re.search(r"permission denied|must be |must have ", text):
                raise StoreError(f"cannot set up {where}: {text}",
                                 hint="run it as a role that may create roles and schemas (a superuser, or one "
                                      "with CREATEROLE that owns the database)") from None
            raise store_error(e, where, pg_url.secrets_of(url), "set up") from None
    except (Exception, KeyboardInterrupt) as e:
        text = e.user_message() if isinstance(e, OcwError) else (
            "interrupted; nothing was changed" if isinstance(e, KeyboardInterrupt) else f"{type(e).__name__}: {e}")
        print(f"{doing}: {_one_line(text)}", file=sys.stderr)
        return 130 if isinstance(e, KeyboardInterrupt) else 2
    finally:
        if conn is not None:
            conn.close()
    for line in said:
        print(f"{doing}: {_one_line(line)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "db":
        return db_main(args)
    source = args.source or _default()
    dest = args.dest or _default()
    src = dst = None
    new_files: list[str] = []
    try:
        from ocw.store.transfer import copy_sessions, session_ids

        if _is_file(source):
            _check_source(source)
        src = _open(source)
        ids = session_ids(src, args.session, hint="check the name (a session's name or id)")
        new_files = _created(dest)
        dst = _open(dest)
        if (src.kind, str(src.path)) == (dst.kind, str(dst.path)):
            raise StoreError(f"--from and --to are the same database ({src.describe()})")
        outcomes = copy_sessions(src, dst, ids=ids)
    except (Exception, KeyboardInterrupt) as e:
        # Every failure is one line on stderr (a DuckDB, psycopg or OS error too), its
        # `user:password@` masked; a destination this run created holds nothing: removed.
        for b in (dst, src):
            if b is not None:
                b.close()
        src = dst = None
        for f in new_files:
            try:
                os.remove(f)
            except (OSError, ValueError):  # ValueError: a name with a NUL (never created)
                pass
        text = e.user_message() if isinstance(e, OcwError) else (
            "interrupted; nothing was copied" if isinstance(e, KeyboardInterrupt) else f"{type(e).__name__}: {e}")
        print(f"ocw {args.command}: {_one_line(text)}", file=sys.stderr)
        return 130 if isinstance(e, KeyboardInterrupt) else 2
    finally:
        for b in (src, dst):
            if b is not None:
                b.close()
    for o in outcomes:
        print(" ".join(mask_credentials(o.line()).splitlines()))
    counts = {k: sum(o.status == k for o in outcomes) for k in ("copied", "updated", "same", "refused")}
    print(f"ocw {args.command}: {len(outcomes)} session(s) from {src.describe()} to {dst.describe()}: "
          f"{counts['copied']} copied, {counts['updated']} updated, {counts['same']} already there, "
          f"{counts['refused']} refused")
    return 1 if counts["refused"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
