"""Test-wide isolation, for tests/ and the nbval-run notebooks alike.

Kernels started by nbval or nbclient inherit this process's environment, so the
settings made here at import time reach them too: a throwaway DuckDB file (never
the user's own), the offline provider, and no provider keys or OCW_* overrides
from the developer's shell.
"""
import os
import tempfile

_TMP = tempfile.mkdtemp(prefix="ocw-tests-")
for _k in list(os.environ):
    if _k.startswith("OCW_") or _k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME"):
        del os.environ[_k]
os.environ["OCW_DB"] = os.path.join(_TMP, "ocw-tests.duckdb")
