"""Lenient parsing of fastjson output: bare (unquoted) map keys (rocketmq-internals.md 1.11)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_ha.protocol.json_compat import BodyDecodeError, dumps, loads, quote_bare_keys


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{0:"127.0.0.1:10911"}', {"0": "127.0.0.1:10911"}),
        ('{0:"a",1:"b",10:"c"}', {"0": "a", "1": "b", "10": "c"}),
        ('{-1:"x"}', {"-1": "x"}),
        ('{9223372036854775807:"max"}', {"9223372036854775807": "max"}),
        ('{ 0 : "a" ,\n\t1\r\n:"b" }', {"0": "a", "1": "b"}),
        ('{"m":{0:{1:{2:3}}}}', {"m": {"0": {"1": {"2": 3}}}}),
        ('{"offsetTable":{"T@G":{0:100,1:200}}}', {"offsetTable": {"T@G": {"0": 100, "1": 200}}}),
        # arrays of numbers are values, not keys
        ('{"a":[1,2,-3],0:[4, 5]}', {"a": [1, 2, -3], "0": [4, 5]}),
        ('[{0:"a"},{1:"b"}]', [{"0": "a"}, {"1": "b"}]),
        # key-like text inside strings stays untouched
        ('{"s":"{0:1}",0:"x"}', {"s": "{0:1}", "0": "x"}),
        ('{"s":"a,1:b",1:"c"}', {"s": "a,1:b", "1": "c"}),
        # escaped quotes and backslashes inside strings
        ('{"s":"he said \\"{0:1}\\"",2:"y"}', {"s": 'he said "{0:1}"', "2": "y"}),
        ('{"s":"ends with backslash \\\\",3:"z"}', {"s": "ends with backslash \\", "3": "z"}),
        ('{"s":"\\\\\\",4:5",6:7}', {"s": '\\",4:5', "6": 7}),
        # booleans as keys (Map<Boolean, ...>) and as values
        ('{true:1,false:0,"b":true}', {"true": 1, "false": 0, "b": True}),
        ('{1.5:"f",2e3:"e"}', {"1.5": "f", "2e3": "e"}),
        ('{"u":"\\u00e9\\u4e2d",0:"\u4e2d"}', {"u": "\u00e9\u4e2d", "0": "\u4e2d"}),
        ("{}", {}),
        ('{"a":{}}', {"a": {}}),
    ],
)
def test_fastjson_bare_keys(raw: str, expected: Any) -> None:
    assert loads(raw) == expected
    assert loads(raw.encode()) == expected
    assert json.loads(quote_bare_keys(raw)) == expected


@pytest.mark.parametrize(
    "text",
    ['{"a":1}', "[1,2,3]", '{"a":[1,{"b":2}],"c":"0:1"}', '"{0:1}"', "123", "true", "null"],
)
def test_standard_json_is_unchanged(text: str) -> None:
    assert quote_bare_keys(text) == text
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize("bad", ["{0:}", '{"a":', "{a:1}", "nope", '{"a":1,}', b"\xff\xfe"])
def test_garbage_raises_body_decode_error(bad: str | bytes) -> None:
    with pytest.raises(BodyDecodeError):
        loads(bad)


def test_body_decode_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid JSON"):
        loads("{")


def test_dumps_is_standard_compact_sorted_utf8() -> None:
    out = dumps({"b": 1, "a": {1: "x", 0: "y"}, "c": "\u4e2d"})
    assert out == '{"a":{"0":"y","1":"x"},"b":1,"c":"\u4e2d"}'.encode()
    assert json.loads(out) == {"a": {"0": "y", "1": "x"}, "b": 1, "c": "\u4e2d"}


# --- property: fastjson-style output of any int-keyed structure parses back -----------------

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=12)
)


def nested() -> st.SearchStrategy[Any]:
    return st.recursive(
        json_leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.integers(-(2**63), 2**63 - 1), inner, max_size=4),
            st.dictionaries(st.text(max_size=8), inner, max_size=4),
        ),
        max_leaves=20,
    )


def fastjson_like(v: Any) -> str:
    """Serialize like fastjson's default: integer map keys bare, string keys quoted."""
    if isinstance(v, dict):
        parts = []
        for k, x in v.items():
            key = str(k) if isinstance(k, int) else json.dumps(k)
            parts.append(f"{key}:{fastjson_like(x)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(v, list):
        return "[" + ",".join(fastjson_like(x) for x in v) + "]"
    return json.dumps(v)


def stringify_keys(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): stringify_keys(x) for k, x in v.items()}
    if isinstance(v, list):
        return [stringify_keys(x) for x in v]
    return v


@given(nested())
def test_any_fastjson_output_parses(value: Any) -> None:
    text = fastjson_like(value)
    assert loads(text) == stringify_keys(value)
