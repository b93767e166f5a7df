"""JSON as RocketMQ's Java side writes it, and JSON as we write it.

RocketMQ serializes bodies with fastjson 1.x. Its default output is JSON except for one thing:
maps with non-string keys (`HashMap<Long, String> brokerAddrs`, `Map<Integer, Long>` offsets)
are written with *bare* keys, e.g. `{"brokerAddrs":{0:"127.0.0.1:10911"}}`. Name servers send
standard JSON only to clients announcing version >= V4_9_4 or `acceptStandardJsonOnly`, and
brokers never do, so every parser here must accept bare keys.

`loads` tries the standard parser first and, only if that fails, quotes bare keys
(numbers, `true`, `false`, `null`) that appear outside strings before a `:`, then parses again.
`dumps` always writes standard JSON, compact, with sorted keys (fastjson's field order).

Not handled (not needed by the bodies rmq_ha reads): object-valued keys such as fastjson's
`{{"topic":..}:1}` for `Map<MessageQueue, Long>`, and single-quoted strings.
"""

from __future__ import annotations

import json
from typing import Any, Final

from rmq_ha.errors import RmqHaError


class BodyDecodeError(RmqHaError, ValueError):
    """A JSON body is malformed or does not have the expected shape. `path` locates it."""

    definite = True

    def __init__(self, message: str, path: str = "$") -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


_BARE_START: Final = frozenset("-0123456789tfn")
_BARE_CHARS: Final = frozenset("-+.0123456789eEtruefalsn")
_WS: Final = frozenset(" \t\r\n")


def quote_bare_keys(text: str) -> str:
    """Quote object keys written without quotes, e.g. `{0:"a",-1:"b"}` -> `{"0":"a","-1":"b"}`.

    Only tokens that follow `{` or `,` (outside any string) and are followed by `:` are keys;
    array elements never are, so `[1, 2]` is left alone. Strings, including escaped quotes
    and key-like text inside them, pass through untouched.
    """
    out: list[str] = []
    i, n = 0, len(text)
    expect_key = False  # after '{' or ',' (outside strings)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n:
                if text[j] == "\\":
                    j += 2
                    continue
                if text[j] == '"':
                    break
                j += 1
            out.append(text[i : j + 1])
            i = j + 1
            expect_key = False
            continue
        if c in "{,":
            expect_key = True
            out.append(c)
            i += 1
            continue
        if c in _WS:
            out.append(c)
            i += 1
            continue
        if expect_key and c in _BARE_START:
            j = i
            while j < n and text[j] in _BARE_CHARS:
                j += 1
            k = j
            while k < n and text[k] in _WS:
                k += 1
            if k < n and text[k] == ":":
                out.append('"')
                out.append(text[i:j])
                out.append('"')
                i = j
                expect_key = False
                continue
        expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a JSON body leniently (see module doc). Raises BodyDecodeError."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise BodyDecodeError(f"body is not UTF-8: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as first:
        try:
            return json.loads(quote_bare_keys(text))
        except json.JSONDecodeError:
            raise BodyDecodeError(f"invalid JSON: {first}") from None


def dumps(obj: Any) -> bytes:
    """Standard, compact JSON as UTF-8 bytes, keys sorted (as fastjson orders bean fields)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()
