"""Two kernels, one file: two long-lived processes, each with ONE Store open for its
whole life, append to the same session in turn. Both must succeed, no turn is lost,
their turns interleave (neither waits for the other to exit), and every append chains
under the HEAD it re-read inside its transaction, so the 80 nodes form one chain.

The interleaving is built, not hoped for: before each turn a kernel re-syncs from the
file until the other kernel's newest node (the turn just before its own) is HEAD, with
a bound of 60 s. So the chain alternates A, B, A, B, ... whatever the scheduler does,
and each kernel provably saw the other's node, written while both were running.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
import time

import ocw

TURNS = 40
WAIT_BOUND_S = 60  # per turn: how long a kernel waits for the other's row before giving up

WORKER = textwrap.dedent(
    r"""
    import json, os, random, sys, time
    import ocw
    from ocw.text.tokens import get_encoding

    path, name, tag, go, done_me, done_other, turns, bound = sys.argv[1:9]
    turns, bound = int(turns), float(bound)
    other = "B" if tag == "A" else "A"
    store = ocw.Store(path)                 # ONE Store for the whole life of the process
    s = store.open_session(name)
    get_encoding(s.encoding.name)           # load the tokenizer before the race starts
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)

    def text_of(nid):
        return "".join(b.get("text", "") for b in s.node(nid)["content"])

    def wait_for_other(turn):
        # Re-sync from the file until HEAD is the other kernel's node for `turn`.
        deadline = time.monotonic() + bound
        polls = 0
        while True:
            s.sync()
            polls += 1
            head = s.head
            if head is not None and head not in mine and text_of(head).startswith(f"{other} turn {turn}:"):
                return head, polls
            if time.monotonic() > deadline:
                print(json.dumps({"tag": tag, "error": f"kernel {tag} waited {bound:.0f} s for {other}'s turn {turn}; "
                                  f"HEAD is {head!r}: {text_of(head)[:40] if head else None!r}"}), flush=True)
                sys.exit(3)
            time.sleep(0.05)  # idle between polls, so the holder sees a pause and hands the file over

    rng = random.Random(tag)
    out, mine = [], set()
    for i in range(turns):
        saw, polls = (None, 0)
        if tag == "B" or i > 0:             # A opens; then each turn follows the other's
            saw, polls = wait_for_other(i if tag == "B" else i - 1)
        t0 = time.time()
        nid = s.append("user" if tag == "A" else "assistant", f"{tag} turn {i}: " + "words " * rng.randint(5, 40))
        t1 = time.time()
        mine.add(nid)
        branch = s.branch()
        out.append({"id": nid, "saw": saw, "polls": polls, "t0": t0, "t1": t1, "ms": (t1 - t0) * 1000,
                    "branch_len": len(branch), "head_ok": branch[-1] == nid == s.head,
                    "parent": s.node(nid)["parent_id"]})
    open(done_me, "w").close()
    deadline = time.time() + 60
    while not os.path.exists(done_other) and time.time() < deadline:
        time.sleep(0.005)
    s.sync()                                # the other kernel's nodes, read from the file
    branch = s.branch()
    parents = {nid: s.node(nid)["parent_id"] for nid in branch}
    occ = s.occupancy()
    print(json.dumps({
        "tag": tag, "pid": os.getpid(), "turns": out, "branch": branch, "parents": parents,
        "head": s.head, "occupancy_total": occ["total"], "opens": store.db.opens,
        "waits": store.db.waits, "handoffs": store.db.handoffs,
    }), flush=True)
    store.close()
    """
)


def run_two_kernels(tmp_path, turns: int):
    """Two worker processes racing on one session; returns (reports, chain rows, wall seconds)."""
    db = str(tmp_path / "shared.duckdb")
    setup = ocw.Store(db)
    setup.create_session(model="gpt-4o", context_window=200_000, name="shared", system_prompt="Two kernels.")
    setup.close()

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    go = tmp_path / "go"
    done = {t: tmp_path / f"done-{t}" for t in "AB"}
    procs = {
        t: subprocess.Popen(
            [sys.executable, str(script), db, "shared", t, str(go), str(done[t]), str(done["B" if t == "A" else "A"]),
             str(turns), str(WAIT_BOUND_S)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for t in "AB"
    }
    try:
        for p in procs.values():
            assert p.stdout.readline().strip() == "ready"
        go.write_text("")
        t_start = time.time()
        outputs = {t: p.communicate(timeout=2 * WAIT_BOUND_S + 60) for t, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    elapsed = time.time() - t_start

    reports = {}
    for t, (stdout, stderr) in outputs.items():
        assert procs[t].returncode == 0, f"kernel {t} failed:\n{stdout[-2000:]}\n{stderr}"
        assert "Error" not in stderr and "Traceback" not in stderr, stderr  # no lock error reached a caller
        reports[t] = json.loads(stdout.strip().splitlines()[-1])
    check = ocw.Store(db)
    with check.db.connect() as con:
        rows = con.execute("SELECT id, parent_id, seq FROM nodes ORDER BY seq").fetchall()
    check.close()
    assert os.path.exists(db + ".ocw-lock")
    return reports, rows, elapsed


def writer_changes(reports, chain):
    writer = {x["id"]: t for t, r in reports.items() for x in r["turns"]}
    return sum(1 for x, y in zip(chain, chain[1:]) if writer[x] != writer[y])


def print_costs(label, reports, changes, elapsed):
    print(f"\n{label}: {elapsed:.2f} s wall; writer changed {changes} times")
    for t, r in sorted(reports.items()):
        ms = [x["ms"] for x in r["turns"]]
        print(f"  kernel {t}: per-turn median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms; "
              f"opens {r['opens']}, waits {r['waits']}, hand-offs {r['handoffs']}")


def test_two_kernels_append_to_one_session(tmp_path):
    reports, rows, elapsed = run_two_kernels(tmp_path, TURNS)
    a, b = reports["A"], reports["B"]
    assert a["pid"] != b["pid"]

    # No turn lost: all 80 nodes are in the file, and every append reported its own id as HEAD.
    ids = {t: [x["id"] for x in r["turns"]] for t, r in reports.items()}
    assert len(ids["A"]) == len(ids["B"]) == TURNS
    assert all(x["head_ok"] for r in reports.values() for x in r["turns"])
    assert len(rows) == 2 * TURNS
    assert {r[0] for r in rows} == set(ids["A"]) | set(ids["B"])

    # One chain: each append re-read HEAD in its transaction, so its parent is the node
    # written just before it, whichever kernel wrote that one.
    chain = [r[0] for r in rows]
    assert rows[0][1] is None
    assert all(rows[i][1] == rows[i - 1][0] for i in range(1, len(rows)))

    # They interleaved, by construction: each turn waited for the other's previous turn,
    # so the chain alternates A, B, A, B, ... and the writer changes at every node.
    writer = {x["id"]: t for t, r in reports.items() for x in r["turns"]}
    assert "".join(writer[n] for n in chain) == "AB" * TURNS
    changes = writer_changes(reports, chain)
    assert changes == 2 * TURNS - 1
    # Each kernel saw the other's node before each of its turns (A's first turn aside) and
    # appended under exactly that node: the other was alive and writing while it ran.
    for me, other in (("A", "B"), ("B", "A")):
        theirs = [x["id"] for x in reports[other]["turns"]]
        expected_saw = ([None] + theirs[:-1]) if me == "A" else theirs
        assert [x["saw"] for x in reports[me]["turns"]] == expected_saw
        assert [x["parent"] for x in reports[me]["turns"]] == [x["saw"] for x in reports[me]["turns"]]
    # Each kernel saw the other's nodes during the run, not only at the end.
    for t, r in reports.items():
        lens = [x["branch_len"] for x in r["turns"]]
        assert lens == [2 * i + (1 if t == "A" else 2) for i in range(TURNS)]
        assert max(lens) > TURNS

    # After the other wrote, sync() shows its nodes, and HEAD is a valid chain in each kernel.
    for r in reports.values():
        assert r["branch"] == chain
        assert r["head"] == chain[-1]
        parents = r["parents"]
        assert parents[chain[0]] is None
        assert all(parents[n] in parents for n in chain[1:])  # every node's parent exists
        assert [parents[n] for n in chain[1:]] == chain[:-1]
    assert a["occupancy_total"] == b["occupancy_total"]
    assert a["waits"] > 0 and b["waits"] > 0

    print_costs(f"two kernels, {TURNS} turns each", reports, changes, elapsed)

