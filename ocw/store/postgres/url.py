"""PostgreSQL URLs: which values name a database, and what of them may be shown.

Invariant: a password never travels with the URL ocw keeps. `checked(url)`
takes a `postgresql://` or `postgres://` URL, moves its password (in the
user part, or a `password=` / `sslpassword=` parameter) into a `Secret`
(ocw/text/secrets.py: never shown, masked by the log filter), and returns the
URL without it — the value `%config Ocw.db`, `Store.path` and every later
step hold. `connect_url()` puts it back only on the way into psycopg. The
password may as well come from libpq's own places (PGPASSWORD, ~/.pgpass, a
service file): those ocw never reads at all. What is shown (`display`) is
the user, host, port and database — never a query parameter.

Pure (no database driver): `%load_ext ocw` and `%config` use it.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from ocw.text.errors import BadDatabasePath
from ocw.text.secrets import Secret, mask_credentials

SCHEMES = ("postgresql", "postgres")
SECRET_PARAMS = ("password", "sslpassword")
_ANY_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^(md|motherduck):", re.IGNORECASE)

# URL without its password -> the secrets it last connected with (this process only):
# what a plain string without a password (the value %config shows) reconnects with.
_SECRETS: dict[str, dict[str, Secret]] = {}


class DbUrl(str):
    """A PostgreSQL URL without its password: a real str (what reopens the
    database), whose repr shows user, host and database only.

    It carries the secrets it came with (`secrets`), and a store reconnects with
    those — never with whatever another URL of the same user, host and database
    brought later. (Keyed by the URL alone, a mistyped password opened beside a
    working store replaced that store's password at its next reconnect.)"""

    secrets: dict[str, Secret] = {}

    def __repr__(self) -> str:
        return repr(display(self))


def is_url(value) -> bool:
    """Does `value` look like a URL of any scheme (rather than a file path)?"""
    return isinstance(value, str) and bool(_ANY_URL.match(value.strip()))


def is_postgres_url(value) -> bool:
    if not isinstance(value, str):
        return False
    head = value.strip().split("://", 1)
    return len(head) == 2 and head[0].lower() in SCHEMES


def _split(url: str):
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as e:
        # urllib's words may quote the text after the user's colon — a password's first
        # characters when it holds / # or ? — so words that quote anything are never shown.
        why = str(e) if "'" not in str(e) and '"' not in str(e) else "the part after the host is not a port number"
        raise BadDatabasePath(f"cannot use {redact(url)!r} as the ocw database: {why}", hint="write it as postgresql://user@host:5432/database; a password "
                              "holding / # ? @ or : is written percent-encoded (%2F %23 %3F %40 %3A)") from None
    return parts


def _netloc(user: str | None, host: str | None, port: int | None) -> str:
    out = quote(user, safe="") + "@" if user else ""
    if host:
        out += f"[{host}]" if ":" in host else host
    if port:
        out += f":{port}"
    return out


def _join(scheme: str, netloc: str, path: str, query: str) -> str:
    """urlunsplit, but `scheme://` kept even with no host (libpq reads the rest from
    the environment or a service file)."""
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


def checked(url: str) -> DbUrl:
    """The URL ocw keeps (no password), the password remembered as a Secret.
    BadDatabasePath (one line, nothing secret in it) when it is not a usable
    PostgreSQL URL."""
    if isinstance(url, DbUrl):
        return url  # already checked: keep the secrets it carries
    if not is_postgres_url(url):
        raise BadDatabasePath(f"cannot use {redact(url)!r} as the ocw database: not a postgresql:// URL")
    parts = _split(url)
    if "\x00" in url or any(c.isspace() for c in url.strip()):
        raise BadDatabasePath(f"cannot use {redact(url)!r} as the ocw database: the URL contains a space or "
                              "a control character", hint="percent-encode it (%20)")
    secrets: dict[str, Secret] = {}
    if parts.password is not None:
        secrets["password"] = Secret(unquote(parts.password))
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in SECRET_PARAMS:
            secrets[key] = Secret(value)
        else:
            query.append((key, value))
    user = unquote(parts.username) if parts.username else None
    netloc = _netloc(user, parts.hostname, parts.port)
    clean = DbUrl(_join("postgresql", netloc, parts.path, urlencode(query)))
    clean.secrets = secrets or dict(_SECRETS.get(str(clean), {}))
    return clean


def remember(url: DbUrl) -> None:
    """After a successful connection: the secrets `url` carries are the ones a later
    plain string of the same URL (no password) connects with. Only after success,
    so a mistyped password is never remembered."""
    if isinstance(url, DbUrl) and url.secrets:
        _SECRETS[str(url)] = dict(url.secrets)


def connect_url(url: str) -> str:
    """What psycopg connects with: the kept URL plus the secrets that came in it."""
    clean = checked(url)
    secrets = clean.secrets
    if not secrets:
        return str(clean)
    parts = urlsplit(clean)
    netloc = parts.netloc
    query = parse_qsl(parts.query, keep_blank_values=True)
    if "password" in secrets:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user}:{quote(secrets['password'].get() or '', safe='')}@{host}"
    query += [(k, s.get() or "") for k, s in secrets.items() if k != "password"]
    return _join(parts.scheme, netloc, parts.path, urlencode(query))


def secrets_of(url: str) -> list[Secret]:
    """The secrets that came with this URL (to mask them in any message)."""
    try:
        return list(checked(url).secrets.values())
    except BadDatabasePath:
        return []


def display(url: str, *, user: str | None = None, host: str | None = None, port=None,
            dbname: str | None = None) -> str:
    """`postgresql://user@host:port/database` and nothing more; the keyword values
    (from a live connection) win over the URL's. A socket folder is said as such."""
    try:
        parts = urlsplit(url.strip())
        q = dict(parse_qsl(parts.query))
        url_user, url_host, url_port = parts.username, parts.hostname, parts.port
    except ValueError:
        return "postgresql://<unreadable URL>"
    user = user or (unquote(url_user) if url_user else None) or q.get("user")
    host = host or url_host or q.get("host")
    port = port or url_port or q.get("port")
    dbname = dbname or unquote(parts.path.lstrip("/")) or q.get("dbname") or ""
    service = "" if host or not q.get("service") else f" (service {q['service']})"
    if host and host.startswith("/"):
        where = _netloc(user, None, None) + f"/{dbname} (socket {host}" + (f", port {port})" if port else ")")
        return "postgresql://" + where + service
    return f"postgresql://{_netloc(user, host, int(port) if str(port or '').isdigit() else None)}/{dbname}{service}"


def redact(value) -> str:
    """Any URL with its password and query removed (for the line that refuses it)."""
    if not isinstance(value, str):
        return repr(value)
    text = mask_credentials(value.strip())
    if not is_url(text) or "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        user = parts.username
        port = parts.port
    except ValueError:
        return text.split("://", 1)[0] + "://<unreadable>"
    return _join(parts.scheme, _netloc(unquote(user) if user else None, host, port), parts.path, "")
