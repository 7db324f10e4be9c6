"""The operators of `make mutation-sample` (tools/mutation_sample.py): realistic one-line bugs.

A mutant is one edit of a source file: a span (start, end as character offsets) and
the text put there. Python mutants are found with `ast` and written as text over the
node's own span, so the rest of the file — comments, layout, line numbers — stays as
it was (a test that reads a module's source sees the same lines). JS mutants come
from a small scanner over widgets/*.js that skips comments and string literals.

Operators (the `op` of each mutant), the edits a person makes by mistake:
- compare:   `<`↔`<=`, `>`↔`>=`, `==`↔`!=`, `in`↔`not in`, `is`↔`is not` (boundaries, flips)
- boolop:    `and`↔`or`
- not:       `not x` → `x`
- call:      a call on its own line dropped (`f(x)` → `pass`), not the logger's
- swap:      the first two positional arguments of a call swapped
- regex:     a quantifier in a pattern given to `re.*` changed (`+`→`*`, `{m,n}`→`{m+1,n}`, `?` dropped)
- guard:     `if …: raise` → the check skipped (`if False:`)
- default:   a parameter's default changed (number ±1, True↔False, None→0/"" for a literal)
- const:     an integer constant ±1 (not in docstrings, not 0/1 in slices)
- cond:      an `if`/`while` test negated
JS: compare (`===`↔`!==`, `<`↔`<=`, `>`↔`>=`), boolop (`&&`↔`||`), not (`!x` → `x`),
const (integer ±1), bool (`true`↔`false`), call (a statement call line dropped).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the repository root
    op: str
    line: int
    start: int  # character offsets into the file's text
    end: int
    new: str
    old: str

    def key(self) -> str:
        """What an equivalents entry names: path, operator, the original and mutated text
        (one line each, whitespace collapsed) — stable when other lines move."""
        def one(s: str) -> str:
            return " ".join(s.split())
        return f"{self.path} | {self.op} | {one(self.old)} => {one(self.new)}"

    def apply(self, text: str) -> str:
        return text[:self.start] + self.new + text[self.end:]


# -- Python ------------------------------------------------------------------------------------
_SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_RE_FUNCS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
_LOGGERS = {"log", "logger", "logging", "_log", "warnings"}
_QUANT = re.compile(r"(?<!\\)(\{(\d+),(\d*)\}|\+|\*|\?)")


def _offsets(text: str) -> list[int]:
    out, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        out.append(pos)
    return out


class _PyFinder(ast.NodeVisitor):
    def __init__(self, path: str, text: str):
        self.path, self.text, self.lines = path, text, _offsets(text)
        self.out: list[Mutant] = []
        self.docstrings: set[int] = set()

    def pos(self, lineno: int, col: int) -> int:
        # ast's col_offset counts UTF-8 bytes; turn it into characters of that line
        start = self.lines[lineno - 1]
        line = self.text[start:self.lines[lineno]]
        return start + len(line.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.pos(node.lineno, node.col_offset), self.pos(node.end_lineno, node.end_col_offset)

    def add(self, op: str, node: ast.AST, new: str) -> None:
        s, e = self.span(node)
        old = self.text[s:e]
        if old != new:
            self.out.append(Mutant(self.path, op, node.lineno, s, e, new, old))

    # docstrings are text, not code
    def _mark_doc(self, body: list) -> None:
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            self.docstrings.add(id(body[0].value))

    def visit_Module(self, node):
        self._mark_doc(node.body)
        self.generic_visit(node)

    def visit_ClassDef(self, node):
        self._mark_doc(node.body)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        self._mark_doc(node.body)
        a = node.args
        for d in [*a.defaults, *[x for x in a.kw_defaults if x is not None]]:
            if isinstance(d, ast.Constant):
                v = d.value
                if isinstance(v, bool):
                    self.add("default", d, repr(not v))
                elif isinstance(v, (int, float)):
                    self.add("default", d, repr(v + 1))
                elif v is None:
                    self.add("default", d, "0")
                elif isinstance(v, str):
                    self.add("default", d, repr(v + "x") if v else "'x'")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Compare(self, node):
        if len(node.ops) == 1 and type(node.ops[0]) in _SWAP_CMP:
            new = ast.Compare(left=node.left, ops=[_SWAP_CMP[type(node.ops[0])]()], comparators=node.comparators)
            self.add("compare", node, ast.unparse(new))
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        self.add("boolop", node, ast.unparse(ast.BoolOp(op=other, values=node.values)))
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            self.add("not", node, "(" + ast.unparse(node.operand) + ")")
        self.generic_visit(node)

    def visit_Expr(self, node):
        call = node.value
        if isinstance(call, ast.Call) and not self._is_logger(call.func):
            self.add("call", node, "pass")
        self.generic_visit(node)

    @staticmethod
    def _is_logger(func) -> bool:
        while isinstance(func, ast.Attribute):
            func = func.value
        return isinstance(func, ast.Name) and func.id in _LOGGERS

    def visit_Call(self, node):
        pos = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(pos) >= 2 and len(pos) == len(node.args) and ast.unparse(pos[0]) != ast.unparse(pos[1]):
            s0, e0 = self.span(pos[0])
            s1, e1 = self.span(pos[1])
            if e0 <= s1:
                old = self.text[s0:e1]
                new = self.text[s1:e1] + self.text[e0:s1] + self.text[s0:e0]
                self.out.append(Mutant(self.path, "swap", node.lineno, s0, e1, new, old))
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in _RE_FUNCS and isinstance(f.value, ast.Name) \
                and f.value.id == "re" and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            self._regex(node.args[0])
        self.generic_visit(node)

    def _regex(self, const: ast.Constant) -> None:
        pattern = const.value
        for m in _QUANT.finditer(pattern):
            q = m.group(1)
            if q.startswith("{"):
                lo, hi = int(m.group(2)), m.group(3)
                if hi and lo + 1 > int(hi):
                    continue
                new_q = "{%d,%s}" % (lo + 1, hi)
            elif q == "+":
                new_q = "*"
            elif q == "*":
                new_q = "+"
            else:
                if m.start() > 0 and pattern[m.start() - 1] in "(*+}?":
                    continue  # (?:…), lazy quantifiers: not a quantifier of its own
                new_q = ""
            new_pattern = pattern[:m.start()] + new_q + pattern[m.end():]
            try:
                re.compile(new_pattern)
            except re.error:
                continue
            self.add("regex", const, repr(new_pattern))

    def visit_If(self, node):
        if len(node.body) == 1 and isinstance(node.body[0], ast.Raise):
            self.add("guard", node.test, "False")
        else:
            self.add("cond", node.test, "not (" + ast.unparse(node.test) + ")")
        self.generic_visit(node)

    def visit_While(self, node):
        self.add("cond", node.test, "not (" + ast.unparse(node.test) + ")")
        self.generic_visit(node)

    def visit_Constant(self, node):
        v = node.value
        if id(node) in self.docstrings or isinstance(v, bool) or not isinstance(v, int):
            return
        self.add("const", node, repr(v + 1))
        if v > 1:
            self.add("const", node, repr(v - 1))


def python_mutants(path: str, text: str) -> list[Mutant]:
    """Every candidate edit; whether it still parses is asked of the sampled ones only
    (`valid`: parsing the file once per candidate took minutes over the package)."""
    f = _PyFinder(path, text)
    f.visit(ast.parse(text))
    return f.out


def valid(m: Mutant, text: str) -> bool:
    """The mutated file still parses (a `pass` where an expression was would not)."""
    if not m.path.endswith(".py"):
        return True
    try:
        ast.parse(m.apply(text))
    except SyntaxError:
        return False
    return True


# -- JavaScript --------------------------------------------------------------------------------
_JS_STRING = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|`(?:[^`\\]|\\.)*`|/\*.*?\*/|//[^\n]*""",
                        re.S)
_JS_OPS = [
    ("compare", re.compile(r"===|!==|<=|>=|(?<![=<>!-])<(?![=<])|(?<![=>-])>(?![=>])"),
     {"===": "!==", "!==": "===", "<=": "<", ">=": ">", "<": "<=", ">": ">="}),
    ("boolop", re.compile(r"&&|\|\|"), {"&&": "||", "||": "&&"}),
    ("not", re.compile(r"!(?=[\w(])"), {"!": ""}),
    ("bool", re.compile(r"\b(?:true|false)\b"), {"true": "false", "false": "true"}),
    ("const", re.compile(r"(?<![\w.])\d+(?![\w.])"), None),
]
_JS_CALL_LINE = re.compile(r"^[ \t]*(?:[\w$.]+\.)?[\w$]+\([^;]*\);[ \t]*$", re.M)
_JS_SKIP_CALL = re.compile(r"^\s*(?:console\.|return\b|import\b|export\b)")


def _masked(text: str) -> str:
    """The text with strings, template literals and comments blanked (same length),
    so operators inside them are not mutated. A template's `${…}` is code, but blanking
    it only loses mutants, never makes a wrong one."""
    return _JS_STRING.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1]
                          if len(m.group(0)) >= 2 else m.group(0), text)


def js_mutants(path: str, text: str) -> list[Mutant]:
    masked = _masked(text)
    starts = _offsets(text)

    def line_of(pos: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    out = []
    for op, rx, table in _JS_OPS:
        for m in rx.finditer(masked):
            old = m.group(0)
            if op == "const":
                news = [str(int(old) + 1)] + ([str(int(old) - 1)] if int(old) > 1 else [])
            else:
                news = [table[old]]
            for new in news:
                out.append(Mutant(path, op, line_of(m.start()), m.start(), m.end(), new, old))
    for m in _JS_CALL_LINE.finditer(masked):
        if _JS_SKIP_CALL.match(m.group(0)):
            continue
        s = m.start() + len(m.group(0)) - len(m.group(0).lstrip())
        out.append(Mutant(path, "call", line_of(s), s, m.end(), "/* dropped */", text[s:m.end()]))
    return out


def mutants(path: str, text: str) -> list[Mutant]:
    return js_mutants(path, text) if path.endswith(".js") else python_mutants(path, text)


# -- provably equivalent ---------------------------------------------------------------------
_FALSY = {"0", "''", '""', "False", "0.0"}


def _truth_use(name: ast.Name, parent: ast.AST) -> bool:
    """`name` is read only for whether it is true: None and any other falsy value behave alike."""
    if isinstance(parent, ast.BoolOp):
        return parent.values[-1] is not name  # the last operand's value is what the expression gives
    if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return parent.test is name
    if isinstance(parent, ast.UnaryOp):
        return isinstance(parent.op, ast.Not)
    if isinstance(parent, ast.Call):
        return isinstance(parent.func, ast.Name) and parent.func.id == "bool" and parent.args == [name]
    return False


def truth_only_default(m: Mutant, text: str) -> bool:
    """A default `None` turned into a falsy literal (`None => 0`) where the function reads the
    parameter only for its truth: every use is `p or …` / `p and …` (not the last operand), an
    `if`/`while`/ternary/assert test, `not p` or `bool(p)` — or, after `p = p or …` at the top of
    its body, the new value. No run of the program can tell the two defaults apart there, so the
    mutant is equivalent by construction and is not a test's to kill (the table excludes it and
    says so). Anything else — `p is None`, `p` passed on, returned, compared — is not proved."""
    if m.op != "default" or m.old != "None" or m.new not in _FALSY or not m.path.endswith(".py"):
        return False
    f = _PyFinder(m.path, text)
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        a = fn.args
        pos = [*a.posonlyargs, *a.args]
        pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + \
            [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        for param, d in pairs:
            if f.span(d) == (m.start, m.end):
                return _only_truth_reads(fn, param.arg)
    return False


def _only_truth_reads(fn: ast.AST, name: str) -> bool:
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    rebound_at = None  # index of a top-level `name = name or …` (the later reads see its value)
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id == name:
            v = stmt.value
            if isinstance(v, ast.BoolOp) and isinstance(v.op, ast.Or) and isinstance(v.values[0], ast.Name) \
                    and v.values[0].id == name and rebound_at is None:
                rebound_at = i
                continue
            return False
    parents = {id(c): p for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
    scope = body if rebound_at is None else body[:rebound_at]
    for stmt in scope:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id == name:
                if not isinstance(node.ctx, ast.Load) or not _truth_use(node, parents[id(node)]):
                    return False
    later = [] if rebound_at is None else body[rebound_at + 1:]
    for stmt in later:  # a nested function or a second binding could read the parameter itself
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                return False
    return True
