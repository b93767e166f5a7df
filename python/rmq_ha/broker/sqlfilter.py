"""SQL92 message filters: a consumer's `MessageSelector.bySql(...)` (RocketMQ's
enablePropertyFilter). Pure: `compile_sql` parses an expression once (cached), `SqlFilter.matches`
evaluates it on one message's properties.

The language and its semantics are RocketMQ's (its filter module, derived from the JMS selector):

* literals: 'strings' ('' is a quote), integers (a trailing L allowed; int range -> Integer,
  else Long), floats (5.5, 5., .5, 5E10), TRUE, FALSE, NULL; identifiers [a-zA-Z_$][a-zA-Z0-9_$]*
  name message properties (user properties and system ones such as TAGS or KEYS); keywords are
  case-insensitive; `--` and `/* */` comments;
* `a = b`, `a <> b`, `a > b`, `>=`, `<`, `<=`, `a [NOT] BETWEEN x AND y`,
  `a [NOT] IN ('s', ...)`, `a IS [NOT] NULL`, `a [NOT] CONTAINS 's'`, `STARTSWITH`, `ENDSWITH`,
  `AND`, `OR`, `NOT`, unary `-` / `+`, parentheses;
* three-valued logic: a missing property makes a comparison unknown (NULL), AND/OR/NOT carry it,
  and only TRUE matches;
* property values are strings; against a number they are converted to the number's type
  (Integer, Long, Double: "3.5" against 3 is an error), two strings in `<`/`>` are compared as
  doubles; a value that cannot be converted makes the evaluation fail, and a message whose
  evaluation fails does not match (RocketMQ logs it and filters the message out).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Union

#: Longer values are no number Java reads (and Python's int() refuses very long ones).
MAX_NUMBER_CHARS: Final = 400
#: Double.MIN_VALUE: RocketMQ refuses a float literal below it (0.0 included) or above
#: Double.MAX_VALUE.
DOUBLE_MIN_VALUE: Final = 5e-324
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class SqlFilterError(ValueError):
    """An expression that does not parse, or cannot be a filter (its message says why)."""


class SqlEvalError(ValueError):
    """A value that cannot be compared (a property that is not a number, say)."""


@dataclass(frozen=True, slots=True)
class Num:
    """A number with its Java type: "i" Integer, "l" Long, "d" Double."""

    v: int | float
    kind: str


Value = Union[None, bool, str, Num]  # noqa: UP007 (a runtime alias)
Props = Mapping[str, str]

_KEYWORDS: Final = frozenset(
    "NOT AND OR BETWEEN IN TRUE FALSE NULL IS CONTAINS STARTSWITH ENDSWITH".split()
)
_TOKEN: Final = re.compile(
    r"""
    (?P<ws>\s+|--[^\n\r]*(?:\r\n|\n|\r|$)|/\*.*?\*/)
  | (?P<float>\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)
  | (?P<int>(?:0|[1-9]\d*)[lL]?)
  | (?P<str>'(?:''|[^'])*')
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
    """,
    re.VERBOSE | re.DOTALL,
)
_JAVA_INT: Final = re.compile(r"[+-]?\d+")
_JAVA_DOUBLE: Final = re.compile(
    r"\s*[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)\s*"
)


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str  # "float" | "int" | "str" | "id" | "kw" | "op" | "end"
    text: str
    pos: int


def _tokens(sql: str) -> list[Tok]:
    out: list[Tok] = []
    pos = 0
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        if m is None:
            raise SqlFilterError(f"unexpected character {sql[pos]!r} at {pos}")
        kind = m.lastgroup or ""
        text = m.group()
        if kind == "id" and text.upper() in _KEYWORDS:
            out.append(Tok("kw", text.upper(), pos))
        elif kind != "ws":
            out.append(Tok(kind, text, pos))
        pos = m.end()
    out.append(Tok("end", "", len(sql)))
    return out


# ---------------------------------------------------------------------------------------------
# values


def _to_number(s: str, kind: str) -> Num:
    """Java's Integer.valueOf / Long.valueOf / Double.valueOf of a property value."""
    if len(s) > MAX_NUMBER_CHARS:
        raise SqlEvalError(f"a {len(s)}-character value is not a number")
    if kind == "d":
        if _JAVA_DOUBLE.fullmatch(s) is None:
            raise SqlEvalError(f"{s!r} is not a number")
        t = s.strip().rstrip("fFdD")
        return Num(float(t.replace("Infinity", "inf")), "d")
    if _JAVA_INT.fullmatch(s) is None:
        raise SqlEvalError(f"{s!r} is not an integer")
    v = int(s)
    lo, hi = (INT_MIN, INT_MAX) if kind == "i" else (LONG_MIN, LONG_MAX)
    if not lo <= v <= hi:
        raise SqlEvalError(f"{s!r} is out of range")
    return Num(v, kind)


def _cmp_same(a: Any, b: Any) -> int:
    if isinstance(a, float) or isinstance(b, float):
        return _double_cmp(float(a), float(b))
    return int(a > b) - int(a < b)


def _double_cmp(a: float, b: float) -> int:
    """Java's Double.compareTo: NaN equals NaN and is above everything, -0.0 is below 0.0."""
    if math.isnan(a) or math.isnan(b):
        return int(math.isnan(a)) - int(math.isnan(b))
    if a == b:
        return int(math.copysign(1, a) > 0) - int(math.copysign(1, b) > 0)
    return 1 if a > b else -1


def compare(lv: Value, rv: Value) -> int:
    """RocketMQ's ComparisonExpression.__compare with string conversion on (never None)."""
    if isinstance(lv, Num) and isinstance(rv, Num):
        return _cmp_same(lv.v, rv.v)
    if isinstance(lv, str) and isinstance(rv, str):
        return _cmp_same(lv, rv)
    if isinstance(lv, bool) and isinstance(rv, bool):
        return _cmp_same(lv, rv)
    if isinstance(lv, Num) and isinstance(rv, str):
        return _cmp_same(lv.v, _to_number(rv, lv.kind).v)
    if isinstance(lv, str) and isinstance(rv, Num):
        return _cmp_same(_to_number(lv, rv.kind).v, rv.v)
    if isinstance(lv, str) and isinstance(rv, bool):
        return _cmp_same(lv.lower() == "true", rv)
    if isinstance(lv, bool) and isinstance(rv, str):
        raise SqlEvalError("a boolean cannot be compared with a string")  # Java: a cast error
    return -1  # a boolean against a number: not comparable, RocketMQ answers "less"


# ---------------------------------------------------------------------------------------------
# expressions


class Expr:
    boolean = False  # yields TRUE/FALSE/NULL (a BooleanExpression)

    def ev(self, props: Props) -> Value:
        raise NotImplementedError


class Const(Expr):
    def __init__(self, value: Value) -> None:
        self.value = value
        self.boolean = value is None or isinstance(value, bool)

    def ev(self, props: Props) -> Value:
        return self.value

    def __repr__(self) -> str:
        v = self.value
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, Num):
            return repr(v.v)
        return "'" + v.replace("'", "''") + "'"


class Prop(Expr):
    def __init__(self, name: str) -> None:
        self.name = name

    def ev(self, props: Props) -> Value:
        return props.get(self.name)

    def __repr__(self) -> str:
        return self.name


class Bool(Expr):
    """A boolean-valued node: `fn` computes it from the message's properties."""

    boolean = True

    def __init__(self, fn: Callable[[Props], Value], text: str) -> None:
        self.fn = fn
        self.text = text

    def ev(self, props: Props) -> Value:
        return self.fn(props)

    def __repr__(self) -> str:
        return self.text


def _negate(e: Expr) -> Expr:
    class Neg(Expr):
        def ev(self, props: Props) -> Value:
            v = e.ev(props)
            return Num(-v.v, v.kind) if isinstance(v, Num) else None

        def __repr__(self) -> str:
            return f"-{e!r}"

    if isinstance(e, Const) and isinstance(e.value, Num):
        return Const(Num(-e.value.v, e.value.kind))
    return Neg()


def as_bool(e: Expr) -> Expr:
    if e.boolean:
        return e
    if isinstance(e, Prop):
        # a property used as a condition is TRUE only for a boolean value, which a message
        # property (a string) never is
        def cast(props: Props) -> Value:
            v = e.ev(props)
            return None if v is None else (v if isinstance(v, bool) else False)

        return Bool(cast, repr(e))
    raise SqlFilterError(f"Expression will not result in a boolean value: {e!r}")


def _not(e: Expr) -> Expr:
    e = as_bool(e)

    def fn(props: Props) -> Value:
        v = e.ev(props)
        return None if v is None else not v

    return Bool(fn, f"NOT {e!r}")


def _logic(a: Expr, b: Expr, decisive: bool) -> Expr:
    """AND (`decisive` False: one FALSE side decides) or OR (True: one TRUE side decides),
    with NULL for an undecided unknown side."""
    a, b = as_bool(a), as_bool(b)

    def fn(props: Props) -> Value:
        lv = a.ev(props)
        if lv is decisive:
            return decisive
        rv = b.ev(props)
        if rv is decisive:
            return decisive
        return None if lv is None or rv is None else not decisive

    return Bool(fn, f"({a!r} {'OR' if decisive else 'AND'} {b!r})")


def _and(a: Expr, b: Expr) -> Expr:
    return _logic(a, b, False)


def _or(a: Expr, b: Expr) -> Expr:
    return _logic(a, b, True)


def _equal(a: Expr, b: Expr, checked: bool = True) -> Expr:
    if checked:
        for e in (a, b):
            if isinstance(e, Const) and e.value is None:
                raise SqlFilterError(f"'{e!r}' cannot be compared.")
        if isinstance(a, Const) and isinstance(b, Const) and a.boolean and not b.boolean:
            raise SqlFilterError(f"'{a!r}' cannot be compared with '{b!r}'")

    def fn(props: Props) -> Value:
        lv, rv = a.ev(props), b.ev(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None or (type(lv) is type(rv) and lv == rv):
            return True
        return compare(lv, rv) == 0

    return Bool(fn, f"{a!r} = {b!r}")


_ORDER: Final[dict[str, Callable[[int], bool]]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _order(op: str, a: Expr, b: Expr) -> Expr:
    for e in (a, b):
        if (isinstance(e, Const) and not isinstance(e.value, Num)) or e.boolean:
            raise SqlFilterError(f"Value '{e!r}' cannot be compared.")
    test = _ORDER[op]

    def fn(props: Props) -> Value:
        lv = a.ev(props)
        if lv is None:
            return None
        rv = b.ev(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            # two strings are compared as doubles, or not at all
            return test(compare(_to_number(lv, "d"), _to_number(rv, "d")))
        return test(compare(lv, rv))

    return Bool(fn, f"{a!r} {op} {b!r}")


def _between(v: Expr, lo: Expr, hi: Expr, negated: bool) -> Expr:
    if isinstance(lo, Const) and isinstance(hi, Const):
        if lo.value is None or hi.value is None:
            raise SqlFilterError("Illegal values of between, values can not be null!")
        try:
            bad = compare(hi.value, lo.value) < 0
        except SqlEvalError as e:
            raise SqlFilterError(str(e)) from None
        if bad:
            raise SqlFilterError(
                f"Illegal values of between, left value({lo!r}) must less than or equal to "
                f"right value({hi!r})"
            )
    if negated:
        return _or(_order("<", v, lo), _order(">", v, hi))
    return _and(_order(">=", v, lo), _order("<=", v, hi))


def _in(v: Expr, items: list[str], negated: bool) -> Expr:
    if not isinstance(v, Prop):
        raise SqlFilterError(f"Expected a property for In expression, got: {v!r}")
    allowed = frozenset(items)

    def fn(props: Props) -> Value:
        x = v.ev(props)
        if not isinstance(x, str):
            return None
        return (x in allowed) != negated

    return Bool(fn, f"{v!r} {'NOT ' if negated else ''}IN {sorted(allowed)!r}")


def _text(op: str, v: Expr, search: str, negated: bool) -> Expr:
    test: Callable[[str], bool] = {
        "CONTAINS": lambda x: search in x,
        "STARTSWITH": lambda x: x.startswith(search),
        "ENDSWITH": lambda x: x.endswith(search),
    }[op]

    def fn(props: Props) -> Value:
        if not search:
            return False
        x = v.ev(props)
        if not isinstance(x, str):
            return False
        return test(x) != negated

    return Bool(fn, f"{v!r} {'NOT ' if negated else ''}{op} {search!r}")


# ---------------------------------------------------------------------------------------------
# parser (recursive descent over RocketMQ's SelectorParser grammar)


class _Parser:
    def __init__(self, sql: str) -> None:
        self.toks = _tokens(sql)
        self.i = 0

    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def is_(self, kind: str, text: str | None = None, k: int = 0) -> bool:
        t = self.peek(k)
        return t.kind == kind and (text is None or t.text == text)

    def take(self, kind: str, text: str | None = None) -> Tok:
        t = self.peek()
        if not self.is_(kind, text):
            want = text or kind
            got = t.text or "the end"
            raise SqlFilterError(f"expected {want} at {t.pos}, found {got!r}")
        self.i += 1
        return t

    def parse(self) -> Expr:
        e = as_bool(self.or_())
        if not self.is_("end"):
            t = self.peek()
            raise SqlFilterError(f"unexpected {t.text!r} at {t.pos}")
        return e

    def or_(self) -> Expr:
        e = self.and_()
        while self.is_("kw", "OR"):
            self.i += 1
            e = _or(e, self.and_())
        return e

    def and_(self) -> Expr:
        e = self.equality()
        while self.is_("kw", "AND"):
            self.i += 1
            e = _and(e, self.equality())
        return e

    def equality(self) -> Expr:
        e = self.comparison()
        while True:
            if self.is_("op", "="):
                self.i += 1
                e = _equal(e, self.comparison())
            elif self.is_("op", "<>"):
                self.i += 1
                e = _not(_equal(e, self.comparison()))
            elif self.is_("kw", "IS") and self.is_("kw", "NULL", 1):
                self.i += 2
                e = _equal(e, Const(None), checked=False)
            elif self.is_("kw", "IS") and self.is_("kw", "NOT", 1):
                self.i += 2
                self.take("kw", "NULL")
                e = _not(_equal(e, Const(None), checked=False))
            else:
                return e

    def comparison(self) -> Expr:
        e = self.unary()
        while True:
            t = self.peek()
            if t.kind == "op" and t.text in _ORDER:
                self.i += 1
                e = _order(t.text, e, self.unary())
                continue
            negated = self.is_("kw", "NOT") and self.peek(1).kind == "kw"
            op = self.peek(1 if negated else 0)
            if op.kind != "kw" or op.text not in ("CONTAINS", "STARTSWITH", "ENDSWITH",
                                                    "BETWEEN", "IN"):  # fmt: skip
                return e
            self.i += 2 if negated else 1
            if op.text == "BETWEEN":
                lo = self.unary()
                self.take("kw", "AND")
                e = _between(e, lo, self.unary(), negated)
            elif op.text == "IN":
                self.take("op", "(")
                items = [self.string()]
                while self.is_("op", ","):
                    self.i += 1
                    items.append(self.string())
                self.take("op", ")")
                e = _in(e, items, negated)
            else:
                e = _text(op.text, e, self.string(), negated)

    def unary(self) -> Expr:
        if self.is_("op", "+"):
            self.i += 1
            return self.unary()
        if self.is_("op", "-"):
            self.i += 1
            return _negate(self.unary())
        if self.is_("kw", "NOT"):
            self.i += 1
            return _not(self.unary())
        return self.primary()

    def string(self) -> str:
        return self.take("str").text[1:-1].replace("''", "'")

    def primary(self) -> Expr:
        t = self.peek()
        if t.kind == "str":
            return Const(self.string())
        if t.kind == "int":
            self.i += 1
            if len(t.text) > 21:
                raise SqlFilterError(f"{t.text[:30]}... is out of the long range")
            v = int(t.text.rstrip("lL"))
            if not LONG_MIN <= v <= LONG_MAX:
                raise SqlFilterError(f"{t.text} is out of the long range")
            return Const(Num(v, "i" if INT_MIN <= v <= INT_MAX else "l"))
        if t.kind == "float":
            self.i += 1
            f = float(t.text)
            if math.isinf(f):
                raise SqlFilterError(f"{t.text} is greater than 1.7976931348623157E308")
            if f < DOUBLE_MIN_VALUE:
                raise SqlFilterError(f"{t.text} is less than 4.9E-324")
            return Const(Num(f, "d"))
        if t.kind == "kw" and t.text in ("TRUE", "FALSE", "NULL"):
            self.i += 1
            return Const({"TRUE": True, "FALSE": False, "NULL": None}[t.text])
        if t.kind == "id":
            self.i += 1
            return Prop(t.text)
        if self.is_("op", "("):
            self.i += 1
            e = self.or_()
            self.take("op", ")")
            return e
        raise SqlFilterError(f"unexpected {t.text or 'end'!r} at {t.pos}")


@dataclass(frozen=True)
class SqlFilter:
    """A compiled expression."""

    sql: str
    expr: Expr

    def evaluate(self, props: Props) -> Value:
        """TRUE, FALSE or None (unknown); SqlEvalError when a value cannot be compared."""
        return self.expr.ev(props)

    def matches(self, props: Props) -> bool:
        """Only TRUE matches; unknown and failed evaluations do not."""
        try:
            return self.expr.ev(props) is True
        except (ValueError, RecursionError):  # SqlEvalError included
            return False


@functools.lru_cache(maxsize=256)
def compile_sql(sql: str) -> SqlFilter:
    """The filter of `sql`, or SqlFilterError saying why it is not one."""
    if not sql or not sql.strip():
        raise SqlFilterError("an empty SQL92 expression")
    if len(sql) > 64 * 1024:
        raise SqlFilterError("an SQL92 expression longer than 64 KiB")
    try:
        f = SqlFilter(sql, _Parser(sql).parse())
        f.evaluate({})  # an expression too deep to evaluate is refused here, not per message
    except SqlEvalError:
        pass
    except RecursionError:
        raise SqlFilterError("the SQL92 expression nests too deep") from None
    return f
