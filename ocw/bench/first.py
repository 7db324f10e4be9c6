"""`python -m ocw.bench.first [--quick]`: two waits issue 28 names, beside their floors.

1. `{name}` of a large string in a `%%chat` message (1 MB and 50 MB) against the
   manual slice a user would otherwise write (`{big_head}` with `big_head =
   big[:N]`, N the characters the cut keeps) — both through the same expansion.
   Target: ≤ 3× the slice.
2. The first `%%chat` of a kernel against its second, in real kernels (the
   offline model, a database an earlier kernel made — creating the file and its
   tables is a once-per-machine cost of about 0.3 s, not a first turn's —, a
   human's 1.5 s between `%load_ext ocw` and the first cell), with the
   background warm-up on (the default) and off.
   Target: the first ≤ 2× the second.

Each figure is the median, p99 and max of its runs, measured in this run beside
its floor, with the machine's load average printed alongside (these machines are
shared and noisy: ratios, not seconds, are the result).
"""
from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import tempfile
import time


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _row(label: str, xs: list[float], floor: list[float]) -> str:
    med, fmed = statistics.median(xs), statistics.median(floor)
    return (f"| {label} | {med * 1000:,.1f} | {_pct(xs, 0.99) * 1000:,.1f} | {max(xs) * 1000:,.1f} | "
            f"{fmed * 1000:,.1f} | {med / fmed:,.2f}× |")


def references(sizes_mb=(1, 50), runs: int = 5) -> list[str]:
    from ocw.notebook.references import BUDGET_TOKENS, Sources, expand

    lines = ["| `{name}` of a string | median ms | p99 ms | max ms | manual slice ms | ratio |",
             "|---|---|---|---|---|---|"]
    for mb in sizes_mb:
        big = ("sensor_id,reading,unit,2024-05-01T12:00:00Z ok\n" * (mb * 1_000_000 // 46 + 1))[: mb * 1_000_000]
        text, _ = expand("look at {big}", Sources({"big": big}, [], {}, None), encoding="o200k_base")
        kept = len(text.split("\n[…")[0]) - len("look at \n```\n")
        ns = {"big": big, "big_head": big[:kept]}
        ours, floor = [], []
        for _ in range(runs):  # interleaved, so both see the same machine load
            t = time.perf_counter()
            expand("look at {big}", Sources(ns, [], {}, None), encoding="o200k_base")
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            expand("look at {big_head}", Sources(ns, [], {}, None), encoding="o200k_base")
            floor.append(time.perf_counter() - t)
        lines.append(_row(f"{mb} MB (keeps {BUDGET_TOKENS:,} tokens)", ours, floor))
    return lines


def _kernel_turns(warm: bool, pause: float, turns: int, d: str) -> list[float]:
    from jupyter_client import KernelManager

    from ocw.conversation.sessions import Store

    db = os.path.join(d, f"first-{warm}-{time.monotonic_ns()}.duckdb")
    Store(db).close()  # a returning user's database: made once per machine, not per kernel
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCW_") and k != "JPY_SESSION_NAME"}
    env.update(OCW_DB=db,
               OCW_WARM_UP="1" if warm else "0", OCW_MODEL="gpt-4o")
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)

    def run(code: str) -> float:
        t = time.perf_counter()
        msg_id = kc.execute(code)
        while True:
            try:
                m = kc.get_iopub_msg(timeout=60)
            except queue.Empty:
                raise RuntimeError(f"no reply to {code!r} in 60 s") from None
            if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "status"
                    and m["content"]["execution_state"] == "idle"):
                return time.perf_counter() - t

    try:
        run("import IPython, ipykernel, traitlets")  # what any kernel has loaded
        run("%load_ext ocw")
        time.sleep(pause)  # the user reads, then runs the first %%chat cell (what is measured)
        return [run(f"%%chat\nWhat do turn {i}'s numbers say about the garden plan?") for i in range(turns)]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def first_turn(kernels: int = 5, pause: float = 1.5) -> list[str]:
    lines = ["| first `%%chat` of a kernel | median ms | p99 ms | max ms | second turn ms | ratio |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="ocw-bench-first-") as d:
        got = {True: ([], []), False: ([], [])}
        for _ in range(kernels):
            for warm in (True, False):  # interleaved: both see the same load
                t = _kernel_turns(warm, pause, 2, d)
                got[warm][0].append(t[0])
                got[warm][1].append(t[1])
    for warm in (True, False):
        lines.append(_row("warm-up on (default)" if warm else "warm-up off", got[warm][0], got[warm][1]))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench.first", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 MB only, one kernel each way (for the tests)")
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", file=sys.stdout)
    print("\n".join(references((1,) if args.quick else (1, 50), runs=2 if args.quick else 5)))
    print()
    print("\n".join(first_turn(1 if args.quick else 5)))
    print(f"load average {os.getloadavg()[0]:.2f} after", file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
