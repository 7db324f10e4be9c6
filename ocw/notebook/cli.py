"""The `ocw` command: move sessions between a DuckDB file and a PostgreSQL database.

    ocw export --to postgresql://me@db.team/ocw [--from FILE] [--session NAME ...]
    ocw import --from postgresql://me@db.team/ocw [--to FILE] [--session NAME ...]

`export` copies out of your ocw database (OCW_DB, else the default file) unless
`--from` names another; `import` copies into it unless `--to` does. Both are
the same idempotent copy (ocw/store/transfer.py): running one twice changes nothing.
One line per session, then a count; a session that could not be copied is
said why, and the exit status is 1. Bad arguments or a store that cannot be
opened: one line on stderr, exit status 2. A URL's password is never printed.
"""
from __future__ import annotations

import argparse
import os
import sys

from ocw.text.errors import OcwError, StoreError


def _open(where: str, *, must_exist: bool):
    from ocw.store.postgres import url as pg_url
    from ocw.conversation.sessions import open_backend

    if must_exist and not pg_url.is_url(where) and where != ":memory:" \
            and not os.path.exists(os.path.expanduser(where)):
        raise StoreError(f"there is no ocw database at {where}", hint="check the path (--from)")
    return open_backend(where)


def _default() -> str:
    from ocw.store.paths import default_db_path

    return default_db_path()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ocw", description="Move ocw sessions between a DuckDB file and a PostgreSQL "
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    source = args.source or _default()
    dest = args.dest or _default()
    src = dst = None
    try:
        from ocw.store.transfer import copy_sessions

        src = _open(source, must_exist=True)
        dst = _open(dest, must_exist=False)
        if (src.kind, str(src.path)) == (dst.kind, str(dst.path)):
            raise StoreError(f"--from and --to are the same database ({src.describe()})")
        outcomes = copy_sessions(src, dst, args.session)
    except OcwError as e:
        print(f"ocw {args.command}: {e.user_message()}", file=sys.stderr)
        return 2
    finally:
        for b in (src, dst):
            if b is not None:
                b.close()
    for o in outcomes:
        print(o.line())
    counts = {k: sum(o.status == k for o in outcomes) for k in ("copied", "updated", "same", "refused")}
    print(f"ocw {args.command}: {len(outcomes)} session(s) from {src.describe()} to {dst.describe()}: "
          f"{counts['copied']} copied, {counts['updated']} updated, {counts['same']} already there, "
          f"{counts['refused']} refused")
    return 1 if counts["refused"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
