"""Node and session ids: a prefix and 12 hex digits of a random UUID (no I/O, no
database import, so anything may make one)."""
from __future__ import annotations

import uuid


def new_id(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex[:12]
