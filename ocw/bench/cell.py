"""`python -m ocw.bench.cell [--quick]`: what a `%%chat` cell costs beside the cell a user
would otherwise write — a hand-written openai-SDK streaming cell — in real kernels.

Both kernels talk to one loopback OpenAI-compatible server in this process (`Loopback`:
SSE chunks, a usage chunk, `[DONE]`), which answers every request with the same reply
at once, so what is timed is the cells' own work: building and sending the request,
reading the stream, and (ocw) storing the turn, the status line and the final render.
The SDK cell keeps its own `history` list, seeded with exactly the messages ocw sent on
its untimed first turn, so both send the same conversation and grow it by the same two
messages a turn. Turns alternate between the two kernels (both see the same load), with
a short pause between cells as a person leaves.

Per session size (ocw's session built with `ocw.bench.build.build_session`, then folded
to a summary and its last `TAIL` messages, the steady state of a long session): the
cell's wall time from execute to idle, p50 / p99 / max, for each; the server's own time
for the request subtracted gives each cell's overhead; the ratio of the overheads' medians.
Target (issue 28): ocw ≤ 1.5× the SDK cell at every size. The load average is printed
beside each row: these machines are shared and noisy, ratios are the result.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "gpt-4o"
TAIL = 200
REPLY = ("The plan holds: the beds along the south fence get the tomatoes, the shade bed keeps the lettuce, "
         "and the water timer stays at twenty minutes until the first heat wave.")
KEY = "sk-bench-not-a-secret"


class Loopback(ThreadingHTTPServer):
    """An OpenAI-compatible chat server on 127.0.0.1 answering `REPLY` in 12 SSE chunks,
    recording each request's messages and its own time per request (seconds)."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self.served: list[float] = []
        self.thread = threading.Thread(target=self.serve_forever, name="bench-loopback", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: the bench prints its own table
        pass

    def do_GET(self) -> None:  # /v1/models
        body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        t0 = time.perf_counter()
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        words = REPLY.split(" ")
        step = -(-len(words) // 12)
        pieces = [" ".join(words[i:i + step]) + " " for i in range(0, len(words), step)]
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
        events += [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (req.get("stream_options") or {}).get("include_usage"):
            events.append({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 40,
                                                    "total_tokens": 1040}})
        for e in events:
            e.update(id="chatcmpl-bench", object="chat.completion.chunk", created=0, model=MODEL)
            self._chunk(f"data: {json.dumps(e)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        self.server.requests.append(req)
        self.server.served.append(time.perf_counter() - t0)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Kernel:
    """A real IPython kernel (jupyter_client) and a way to time one cell in it."""

    def __init__(self, env: dict):
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(self, code: str) -> tuple[float, str]:
        """(seconds from execute to idle, what the cell printed); an error in the cell raises."""
        t = time.perf_counter()
        msg_id = self.kc.execute(code)
        out, error = [], None
        while True:
            try:
                m = self.kc.get_iopub_msg(timeout=120)
            except queue.Empty:
                raise RuntimeError(f"no reply to {code[:40]!r} in 120 s") from None
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            kind = m["msg_type"]
            if kind == "stream":
                out.append(m["content"]["text"])
            elif kind in ("display_data", "update_display_data"):  # a notebook kernel's %%chat renders
                out.append(m["content"]["data"].get("text/plain", ""))
            elif kind == "error":
                error = f"{m['content']['ename']}: {m['content']['evalue']}"
            elif kind == "status" and m["content"]["execution_state"] == "idle":
                if error:
                    raise RuntimeError(f"cell failed: {error}")
                return time.perf_counter() - t, "".join(out)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def _env(server: Loopback, db: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("OCW_") and k not in ("OPENAI_API_KEY", "JPY_SESSION_NAME")}
    env.update(OCW_DB=db, OCW_PROVIDER="openai", OCW_BASE_URL=server.url, OCW_MODEL=MODEL, OPENAI_API_KEY=KEY)
    return env


SDK_SETUP = """import json
from openai import OpenAI
client = OpenAI(base_url={url!r}, api_key={key!r})
history = json.load(open({path!r}))"""

SDK_CELL = """history.append({{"role": "user", "content": {q!r}}})
parts = []
for chunk in client.chat.completions.create(model={model!r}, messages=history, stream=True,
                                            stream_options={{"include_usage": True}}):
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
        parts.append(chunk.choices[0].delta.content)
history.append({{"role": "assistant", "content": "".join(parts)}})"""


def _question(i: int) -> str:
    return f"Turn {i}: with the numbers so far, which bed should get the new seedlings, and why?"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def measure(size: int, turns: int, pause: float, d: str, server: Loopback) -> dict:
    """One session size: `turns` timed cells in each kernel, alternating."""
    from ocw.bench.build import build_session, compact_to_tail
    from ocw.conversation.sessions import Store

    db = os.path.join(d, f"cell-{size}.duckdb")
    name = f"bench-{size}"
    store = Store(db)
    if size:
        s = build_session(store, size, model=MODEL, window=128_000, name=name)
        compact_to_tail(s, TAIL)
    store.close()
    ocw, sdk = _Kernel(_env(server, db)), _Kernel(_env(server, db))
    got = {"ocw": [], "sdk": [], "ocw_over": [], "sdk_over": [], "sent": [], "replies": 0}
    try:
        ocw.run("%load_ext ocw")
        ocw.run(f"%%chat --session {name}\n{_question(0)}")  # untimed: the session's first turn here
        seed = os.path.join(d, f"history-{size}.json")
        with open(seed, "w", encoding="utf-8") as f:
            json.dump(server.requests[-1]["messages"], f)
        sdk.run(SDK_SETUP.format(url=server.url, key=KEY, path=seed))
        sdk.run(SDK_CELL.format(q=_question(0), model=MODEL))  # untimed: the SDK's first call
        for i in range(1, turns + 1):
            for who, kernel, code in (("ocw", ocw, f"%%chat --session {name}\n{_question(i)}"),
                                      ("sdk", sdk, SDK_CELL.format(q=_question(i), model=MODEL))):
                time.sleep(pause)  # the person reads the reply before the next cell (not a wait on a condition)
                n = len(server.served)
                wall, printed = kernel.run(code)
                if len(server.served) != n + 1:
                    raise RuntimeError(f"{who} cell {i} made {len(server.served) - n} requests, not 1")
                got[who].append(wall)
                got[f"{who}_over"].append(wall - server.served[-1])
                got["sent"].append(len(server.requests[-1]["messages"]))
                got["replies"] += REPLY.split(" ")[0] in printed
    finally:
        ocw.close()
        sdk.close()
    return got


def table(sizes: tuple[int, ...], turns: int, pause: float) -> list[str]:
    lines = ["| session size | ocw cell p50 / p99 / max ms | SDK cell p50 / p99 / max ms | "
             "overhead ocw / SDK p50 ms | ratio | load |", "|---|---|---|---|---|---|"]
    server = Loopback()
    try:
        with tempfile.TemporaryDirectory(prefix="ocw-bench-cell-") as d:
            for size in sizes:
                g = measure(size, turns, pause, d, server)
                fmt = lambda xs: " / ".join(f"{v * 1000:,.1f}" for v in  # noqa: E731
                                            (statistics.median(xs), _pct(xs, 0.99), max(xs)))
                over = statistics.median(g["ocw_over"]), statistics.median(g["sdk_over"])
                lines.append(f"| {size:,} messages | {fmt(g['ocw'])} | {fmt(g['sdk'])} | "
                             f"{over[0] * 1000:,.1f} / {over[1] * 1000:,.1f} | {over[0] / over[1]:,.2f}× | "
                             f"{os.getloadavg()[0]:.1f} |")
                lines.append(f"<!-- checks {size}: {g['replies']} of {2 * turns} cells printed the reply; "
                             f"messages sent per request {min(g['sent'])}–{max(g['sent'])} -->")
    finally:
        server.stop()
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocw.bench.cell", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="sizes 0 and 1,000, 3 turns each (for the tests)")
    p.add_argument("--turns", type=int, default=None)
    args = p.parse_args(argv)
    sizes = (0, 1_000) if args.quick else (0, 1_000, 10_000, 100_000)
    turns = args.turns or (3 if args.quick else 30)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {turns} timed cells per kernel "
          f"per size, a {0.3 if args.quick else 1.0:g} s pause before each")
    print("\n".join(table(sizes, turns, 0.3 if args.quick else 1.0)))
    print(f"load average {os.getloadavg()[0]:.2f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
