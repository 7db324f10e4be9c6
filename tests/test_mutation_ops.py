"""tools/mutation_ops.truth_only_default: which `None => 0` default mutants the tier-2 table may
leave out as equivalent by construction — proved on both sides, since a wrong "proved" would
hide a survivor a test should kill."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from mutation_ops import mutants, truth_only_default  # noqa: E402


def proved(body: str, sig: str = "x=None") -> bool:
    text = f"def f({sig}):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    (m,) = [m for m in mutants("ocw/m.py", text) if m.op == "default" and m.old == "None"]
    assert m.new == "0"
    return truth_only_default(m, text)


@pytest.mark.parametrize("body", [
    "return x or 1",
    "return x and 1 or 2",
    "if x:\n    return 1\nreturn 2",
    "return 1 if x else 2",
    "return not x",
    "return bool(x)",
    "while x:\n    break",
    "x = x or 2\nreturn x + 1",          # after `x = x or …` the reads see the new value
])
def test_a_truth_only_read_is_proved_equivalent(body):
    assert proved(body)


@pytest.mark.parametrize("body", [
    "return x",                          # None and 0 returned: a caller sees which
    "return x is None",
    "return g(x)",                       # the callee may tell them apart
    "return 1 and x",                    # the last operand is the expression's value
    "y = x\nreturn y or 1",
    "x = 3\nreturn x or 1",              # rebound to something else
    "x = x or 2\nx = None\nreturn x",
    "return x == 0",
])
def test_any_other_read_is_not_proved(body):
    assert not proved(body)


def test_a_keyword_only_default_and_an_unused_one():
    assert proved("return x or 1", sig="*, x=None")
    assert proved("return 1")            # never read (a Protocol's stub body): no run can differ
    text = "def f(x=1):\n    return x or 1\n"
    (m,) = [m for m in mutants("ocw/m.py", text) if m.op == "default"]
    assert not truth_only_default(m, text)  # only None defaults: 1 => 2 changes a truthy value
