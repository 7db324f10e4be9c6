"""A session two kernels share reads only what the other appended (ocw/store/tail.py,
issue 28): after another Store's append, sync() asks the store for the rows above the
highest seq it holds — not the whole tail again — and the branch is whole."""
from __future__ import annotations

import ocw


def test_another_kernels_appends_are_read_above_what_is_held(tmp_db):
    a, b = ocw.Store(tmp_db), ocw.Store(tmp_db)
    try:
        sa = a.create_session(name="shared", model="gpt-4o")
        mine = [sa.append("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(20)]
        sa._reload()  # as a kernel that opened the session: its tail read from the store
        assert sa.branch() == mine
        top = max(n.seq for n in sa._rows.rows.values())
        assert sa._rows.loaded_to == top
        mine.append(sa.append("user", "one more"))
        top += 1
        assert sa._rows.loaded_to == top  # our own append kept it complete
        sb = b.open_session("shared")
        theirs = [sb.append("user", "theirs 1"), sb.append("assistant", "theirs 2")]
        reads = []
        real = a.backend.nodes_since

        def spy(sid, lo, hi=None, epoch=0):
            got = real(sid, lo, hi, epoch)
            reads.append((lo, hi, len(got)))
            return got

        a.backend.nodes_since = spy
        sa.sync()
        assert reads[0] == (top + 1, None, 2)  # one range read of exactly the two new rows
        assert sum(n for _, _, n in reads) == 2  # nothing else was read again
        assert sa.branch() == mine + theirs
        assert sa._rows.loaded_to == top + 2
        ours = sa.append("user", "after theirs")  # chains under their HEAD
        assert sa.node(ours)["parent_id"] == theirs[-1]
        assert sa.occupancy()["total"] == (sb.sync() or sb.occupancy()["total"])
    finally:
        a.close()
        b.close()
