"""ocw's benchmarks: `make bench` (`python -m ocw.bench all`) measures, in one run,
issue 14's figures and prints them beside their targets.

- build.py — sessions of 10k / 100k / 1M messages, bulk-inserted with SQL;
- turns.py — a turn (count + append + occupancy), the raw DuckDB floor, naive;
- paced.py — human-paced turns of several stores at once, never overlapping;
- fresh.py — open time and memory of a compacted session in a fresh process;
- growth.py — file growth per rolling compaction;
- kernels.py — two processes appending to one file;
- report.py — the tables and targets; cli.py — the command.

Nothing here is imported by `%load_ext ocw`; the package's modules import
lazily so that the child processes (`python -m ocw.bench.fresh`, …) measure
only what they mean to.
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from ocw.bench.cli import main as _main

    return _main(argv)
