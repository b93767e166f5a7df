"""Issue 18: the checker never passes a history it did not understand.

Every line is checked against the schema in Spark before any analysis, with the rules of
rmq_ha.history (one set of tables; the drift test below runs every rule through both readers);
bad input is one line naming file and line, exit 2; a history that cannot show loss (empty,
nothing acknowledged, no complete final drain) is "unknown", exit 3; the verdict and the
table agree in every mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmq_ha import history as h
from rmq_ha.cli import main

pytestmark = pytest.mark.timeout(300)

SEND_INV = (
    '{"index":0,"time_ns":1,"process":1,"type":"invoke","f":"send","value":{"topic":"T","value":7}}'
)


def _lost_send_history(completion_type: str = "ok", f: str = "send") -> list[str]:
    """A send acknowledged at offset 0 that the final drain never saw: the broker answered
    max offset 0 for its queue (the message is gone), so it is lost, unless the completion
    line hides it."""
    done = {
        "index": 1,
        "time_ns": 2,
        "process": 1,
        "type": completion_type,
        "f": f,
        "value": {
            "topic": "T",
            "value": 7,
            "queue_id": 0,
            "queue_offset": 0,
            "broker": "b0",
            "status": "SEND_OK",
        },
    }
    lines = [SEND_INV, json.dumps(done)]
    i = 2
    for detail, off in (("min", 0), ("max", 0)):
        v = {"topic": "T", "queue_id": 0, "broker": "b0", "detail": detail}
        lines.append(
            json.dumps(
                {
                    "index": i,
                    "time_ns": i + 1,
                    "process": 9,
                    "type": "invoke",
                    "f": "offsets",
                    "value": v,
                }
            )
        )
        lines.append(
            json.dumps(
                {
                    "index": i + 1,
                    "time_ns": i + 2,
                    "process": 9,
                    "type": "ok",
                    "f": "offsets",
                    "value": {**v, "offset": off},
                }
            )
        )
        i += 2
    dv = {"topic": "T", "group": "d", "queue_id": 0, "broker": "b0"}
    lines.append(
        json.dumps(
            {
                "index": i,
                "time_ns": i + 1,
                "process": 9,
                "type": "invoke",
                "f": "drain",
                "value": dv,
            }
        )
    )
    lines.append(
        json.dumps(
            {
                "index": i + 1,
                "time_ns": i + 2,
                "process": 9,
                "type": "ok",
                "f": "drain",
                "value": {**dv, "messages": []},
            }
        )
    )
    return lines


def _run(tmp_path: Path, lines: list[str], end: str = "\n") -> tuple[Path, Path]:
    """A run directory holding these history lines: (directory, history file)."""
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    (d / "history.jsonl").write_text("\n".join(lines) + end)
    return d, d / "history.jsonl"


def check_cli(capsys: Any, d: Path, *args: str) -> tuple[int, str, str]:
    rc = main(["check", str(d), "--shuffle-partitions", "2", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _no_trace(text: str) -> None:
    assert "Traceback" not in text and "\tat org.apache" not in text and "at py4j" not in text


def test_the_lost_send_is_found_when_the_history_is_well_formed(spark, tmp_path, capsys):
    d, _ = _run(tmp_path, _lost_send_history())
    rc, out, err = check_cli(capsys, d)
    assert rc == 1, err
    assert "INVALID: lost" in out


@pytest.mark.parametrize(
    "lines, line_no, why",
    [
        # issue 18, row 1: a completion outside the enum hid the loss (VALID, exit 0)
        (_lost_send_history("OK"), 2, "type 'OK' is not one of"),
        (_lost_send_history(f="sent"), 2, "f 'sent' is not one of"),
        # row 3: each of these printed a Java stack trace with no line number
        (
            [
                SEND_INV,
                SEND_INV.replace('"time_ns":1', '"time_ns":"soon"').replace(
                    '"index":0', '"index":1'
                ),
            ],
            2,
            "time_ns: expected an integer, got 'soon'",
        ),
        (
            [SEND_INV.replace('{"topic":"T","value":7}', "17")],
            1,
            "value: expected an object, got 17",
        ),
        ([SEND_INV, "this is not json", SEND_INV], 2, "not JSON"),
        ([SEND_INV, SEND_INV[:40]], 2, "not JSON"),  # a truncated last line
    ],
)
def test_bad_lines_are_named_with_file_and_line_exit_2(
    spark, tmp_path, capsys, lines, line_no, why
):
    d, f = _run(tmp_path, lines, end="" if lines[-1] == SEND_INV[:40] else "\n")
    rc, out, err = check_cli(capsys, d)
    assert rc == 2
    first = err.strip().splitlines()[0]
    assert f"{f}:{line_no}: " in first and why in first, err
    assert "VALID" not in out
    _no_trace(out + err)
    assert len(err.strip().splitlines()) <= 2  # the problem, and how many more lines are bad


def _glued(extra: str) -> list[str]:
    """The lost send's history with its completion line followed by ``extra``."""
    lines = _lost_send_history()
    lines[1] += extra
    return lines


_FAIL = json.dumps(
    {"index": 99, "time_ns": 3, "process": 1, "type": "fail", "f": "send",
     "value": {"topic": "T", "value": 7}}
)  # fmt: skip


@pytest.mark.parametrize(
    "lines",
    [
        _glued(_FAIL),  # two ops on one line: the second (a fail) was dropped unseen
        _glued(" " + _FAIL),
        _glued(" trailing words"),
        _glued("]"),
        _glued("] " + _FAIL),
        _glued(", " + _FAIL),
        [  # single quotes: not JSON
            *_lost_send_history()[:1],
            _lost_send_history()[1].replace('"', "'"),
            *_lost_send_history()[2:],
        ],
    ],
    ids=["glued", "glued-space", "words", "bracket", "bracket-op", "comma-op", "quotes"],
)
def test_a_line_holding_more_than_one_json_value_is_refused(spark, tmp_path, capsys, lines):
    """Spark's JSON reader read a line's first value and dropped the rest: a send's fail
    glued to the line before it passed as VALID. Both readers refuse such a line."""
    d, f = _run(tmp_path, lines)
    with pytest.raises(h.HistoryError, match=r"history\.jsonl:2: "):
        list(h.read(f))
    rc, out, err = check_cli(capsys, d)
    assert rc == 2, out + err
    assert f"{f}:2: " in err.strip().splitlines()[0], err
    _no_trace(out + err)


def _twice(where: str) -> tuple[list[str], int]:
    """The lost send's history with one line naming a field twice (in the op, its value, or
    a message), and that line's number."""
    lines = _lost_send_history()
    if where == "op":  # the send's ok, then a fail: json kept the fail, an aborted read
        lines[1] = lines[1][:-1] + ', "type": "fail"}'
        return lines, 2
    if where == "value":
        lines[1] = lines[1].replace('"status": "SEND_OK"', '"status": "SEND_OK", "value": 8')
        return lines, 2
    msg = '{"topic": "T", "queue_id": 0, "queue_offset": 0, "value": 7, "value": 8}'
    lines[-1] = lines[-1].replace('"messages": []', f'"messages": [{msg}]')
    return lines, len(lines)


@pytest.mark.parametrize("where", ["op", "value", "message"])
def test_a_line_naming_a_field_twice_is_refused_by_both(spark, tmp_path, capsys, where):
    """A JSON object naming a field twice is ambiguous: rmq_ha.history.read took the last
    (`"type":"ok",...,"type":"fail"` read as a fail) and Spark one of them, silently (probe
    j1, j2). Both readers refuse the line, naming it."""
    lines, n = _twice(where)
    d, f = _run(tmp_path, lines)
    with pytest.raises(h.HistoryError, match=rf"history\.jsonl:{n}: has a field twice"):
        list(h.read(f))
    rc, out, err = check_cli(capsys, d)
    assert rc == 2, out + err
    first = err.strip().splitlines()[0]
    assert f"{f}:{n}: " in first and "twice" in first, err
    _no_trace(out + err)


def test_trailing_whitespace_is_still_one_value(spark, tmp_path, capsys):
    d, _ = _run(tmp_path, _glued(" \t  "))
    rc, out, err = check_cli(capsys, d)
    assert rc == 1 and "INVALID: lost" in out, err


def test_a_list_of_strings_holding_a_null_is_refused_by_both(spark, tmp_path, capsys):
    fault = {"index": 50, "time_ns": 1, "process": -1, "type": "info", "f": "fault-start",
             "value": {"fault": "kill", "fault_id": 1, "targets": ["n1", None]}}  # fmt: skip
    lines = [*_lost_send_history(), json.dumps(fault)]
    d, f = _run(tmp_path, lines)
    with pytest.raises(h.HistoryError, match="list of strings"):
        list(h.read(f))
    rc, _out, err = check_cli(capsys, d)
    assert rc == 2 and f"{f}:{len(lines)}: " in err and "list of strings" in err, err


def test_a_message_without_a_value_field_is_a_null_read_in_both(spark, tmp_path):
    """A message whose body did not parse carries a null value; leaving the field out says
    the same to both readers (the Python reader raised a TypeError)."""
    from rmq_check import validate
    from rmq_check.load import load

    poll = {"topic": "T", "group": "g"}
    lines = [
        json.dumps({"index": 0, "time_ns": 1, "process": 1, "type": "invoke", "f": "poll",
                    "value": poll}),
        json.dumps({"index": 1, "time_ns": 2, "process": 1, "type": "ok", "f": "poll",
                    "value": {**poll, "messages": [{"topic": "T", "queue_id": 0,
                                                    "queue_offset": 0}]}}),
    ]  # fmt: skip
    _, f = _run(tmp_path, lines)
    (_, ok) = list(h.read(f))
    assert ok.value.messages is not None and ok.value.messages[0].value is None
    validate.check(load(spark, f))


def test_a_parquet_history_with_a_bad_value_names_the_row(spark, tmp_path, capsys):
    import pyarrow.parquet as pq
    from rmq_check.synth import Synth, generate

    generate(Synth(ops=2_000), tmp_path / "history.parquet")
    t = pq.read_table(tmp_path / "history.parquet")
    types = t.column("type").to_pylist()
    i = types.index("ok")
    types[i] = "OK"
    import pyarrow as pa

    t = t.set_column(t.schema.get_field_index("type"), "type", pa.array(types, pa.string()))
    pq.write_table(t, tmp_path / "history.parquet")
    rc, _out, err = check_cli(capsys, tmp_path)
    assert rc == 2
    assert f"history.parquet row {i + 1}: op {i}: type 'OK'" in err, err


# ---- histories that cannot decide: exit 3 ------------------------------------------------------


def test_an_empty_history_is_unknown_exit_3(spark, tmp_path, capsys):
    """Issue 18, row 2: an empty history was VALID, "exactly-once", exit 0."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "history.jsonl").write_text("")
    rc, out, err = check_cli(capsys, d, "--json")
    assert rc == 3, err
    res = json.loads(out)
    assert res["valid"] == "unknown" and res["guarantee"] == "unknown"
    assert "no operations" in res["unknown_because"][0]


def test_a_history_without_an_acknowledged_send_is_unknown(hist, run_check):
    hist.send(1, 1, "fail")
    hist.drain(20, [])
    res = run_check(hist)
    assert res["valid"] == "unknown"
    assert "nothing was acknowledged" in res["unknown_because"][0]


def test_no_final_drain_makes_loss_unknown_and_names_the_queue(spark, tmp_path, capsys):
    """Issue 18: runs whose final drain read nothing were VALID with lost 0."""
    lines = _lost_send_history()[:2]
    lines.append(
        '{"index":2,"time_ns":3,"process":5,"type":"invoke","f":"poll","value":{"topic":"T","group":"g"}}'
    )
    lines.append(
        '{"index":3,"time_ns":4,"process":5,"type":"ok","f":"poll","value":{"topic":"T","group":"g","messages":[{"topic":"T","queue_id":0,"queue_offset":0,"value":7,"broker":"b0"}]}}'
    )
    d, _ = _run(tmp_path, lines)
    rc, out, err = check_cli(capsys, d)
    assert rc == 3, out + err
    assert out.strip().startswith("verdict: UNKNOWN")
    top = " ".join(out.split("analysis")[0].split())  # above the table (rich wraps lines)
    assert "unknown because there was no final drain" in top and "b0/T/0" in top
    report = (d / "report.html").read_text()
    assert "unknown because there was no final drain" in report.split("<table>")[0]


@pytest.mark.parametrize("case", ["failed", "short", "missed-queue"])
def test_an_incomplete_drain_is_unknown_for_its_queues(hist, run_check, case):
    hist.send(1, 1, q=0, off=0)
    hist.send(1, 2, q=1, off=0)
    hist.poll(10, [(0, 0, 1), (1, 0, 2)])
    if case == "failed":  # the drain's reads failed: nothing read of [0, 1)
        hist.drain(20, [], ends={0: 1, 1: 1}, outcome="info")
    elif case == "short":  # queue 1 holds two messages; the drain stopped after the first
        hist.send(1, 3, q=1, off=1)
        hist.drain(20, [(0, 0, 1), (1, 0, 2)], ends={1: 2})
    else:  # the drain never asked queue 1 for its bounds
        hist.bounds(20, [h.Read("T", 0, 0, 1, None, "b0")])
        hist.op(20, "invoke", "drain", h.Value(topic="T", group="drain"))
        hist.op(20, "ok", "drain", h.Value(topic="T", group="drain", messages=[]))
        hist.ops = [o for o in hist.ops if not (o.f == "offsets" and o.value.queue_id == 1)]
        for i, o in enumerate(hist.ops):
            o.index = i
    res = run_check(hist)
    lost = res["analyses"]["lost"]
    assert res["valid"] == "unknown" and lost["valid"] == "unknown"
    assert res["analyses"]["lost-write"]["valid"] == "unknown"
    assert "b0/T/1" in res["unknown_because"][0]
    assert res["guarantee"] == "unknown"
    if case == "short":  # value 3 was never read: not lost, undecided
        assert (lost["count"], lost["definite"], lost["undecided"]) == (1, 0, 1)


def test_a_definite_loss_on_a_drained_queue_still_fails(hist, run_check):
    hist.send(1, 1, q=0, off=0)
    hist.send(1, 2, q=1, off=0)
    # queue 0 is empty (max 0: value 1 is gone); queue 1 holds 5 but nothing was read
    hist.drain(20, [], ends={0: 0, 1: 5})
    res = run_check(hist)
    assert res["valid"] is False and res["safety_failed"] == ["lost"]
    lost = res["analyses"]["lost"]
    # value 2 sits on the undrained queue: undecided, not definite; the run is still unknown
    assert (lost["count"], lost["definite"], lost["undecided"]) == (2, 1, 1)
    assert "b0/T/1" in res["unknown_because"][0]


# ---- verdict and table agree -------------------------------------------------------------------


def _table_rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│") if c.strip()]
        if len(cells) == 4:
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("mode", [[], ["--exactly-once"], ["--order", "off"]])
def test_verdict_and_table_agree(spark, tmp_path, capsys, hist, mode):
    """Issue 18, row 4: under --exactly-once the table said duplicated was not safety."""
    hist.send(1, 1, off=0)
    hist.poll(10, [(0, 0, 1), (0, 0, 1)])  # delivered twice to the group: duplicated
    hist.drain(20, [(0, 0, 1)])
    d = hist.write(tmp_path / "run")
    rc, out, _err = check_cli(capsys, d, *mode)
    res = json.loads((d / "results.json").read_text())
    rows = _table_rows(out)
    failed = [n for n, (valid, _, safety) in rows.items() if safety == "yes" and valid == "False"]
    assert failed == res["safety_failed"]
    assert [n for n, r in rows.items() if r[2] == "yes"] == res["safety"]
    if mode == ["--exactly-once"]:
        assert rows["duplicated"] == ["False", "1", "yes"] and rc == 1
        assert "INVALID: duplicated" in out
    else:
        assert rows["duplicated"][2] == "no" and rc == 0
        assert "verdict: VALID" in out
    report = (d / "report.html").read_text()
    assert ("<td>duplicated</td><td class='false'>False</td><td>1</td><td>yes</td>" in report) == (
        mode == ["--exactly-once"]
    )


# ---- one set of rules for both readers ---------------------------------------------------------

_SAMPLE: dict[str, Any] = {
    "value": 1,
    "messages": [],
    "topic": "T",
    "queue_id": 0,
    "detail": "max",
    "offset": 1,
    "broker": "b0",
    "fault": "kill",
    "fault_id": 1,
}
_BAD_TYPE = {"int": "soon", "bigint": 3.5, "string": None, "boolean": "yes"}


def _base(f: str, t: str) -> dict[str, Any]:
    """A line of function f and type t that satisfies every rule (t "*": any type)."""
    nem = f in h.NEMESIS_FS
    typ = "info" if nem else ("invoke" if t == "*" else t)
    need = {
        n
        for (ff, tt), names in h.REQUIRED_VALUE_FIELDS.items()
        for n in names
        if ff == f and tt in ("*", typ)
    }
    return {
        "index": 0,
        "time_ns": 1,
        "process": -1 if nem else 1,
        "type": typ,
        "f": f,
        "value": {n: _SAMPLE[n] for n in sorted(need)},
    }


def _corpus() -> list[tuple[str, dict[str, Any] | str]]:
    """(rule, line) for every rule of rmq_ha.history's tables, each line breaking only it."""
    out: list[tuple[str, dict[str, Any] | str]] = []
    for name in h.REQUIRED_OP_FIELDS:
        d = _base("send", "*")
        del d[name]
        out.append((f"required {name}", d))
    for (f, t), names in h.REQUIRED_VALUE_FIELDS.items():
        for name in names:
            d = _base(f, t)
            del d["value"][name]
            out.append((f"{f} {t} requires value.{name}", d))
    for (f, name), _allowed in h.VALUE_ENUMS.items():
        d = _base("send" if f == "*" else f, "*")
        d["value"][name] = "bogus"
        out.append((f"enum {name}", d))
    for name, fs in h.ONLY_ON.items():
        d = _base("send", "*")
        d["value"][name] = 5
        out.append((f"only {fs} carry {name}", d))
    for name, t in h.OP_FIELDS:
        if t in _BAD_TYPE and _BAD_TYPE[t] is not None:
            d = _base("send", "*")
            d[name] = _BAD_TYPE[t]
            out.append((f"type of {name}", d))
    for name, t in h.VALUE_FIELD_TYPES:
        if t in _BAD_TYPE and _BAD_TYPE[t] is not None:
            d = _base("send", "*")
            d["value"][name] = _BAD_TYPE[t]
            out.append((f"type of value.{name}", d))
    for name in h.REQUIRED_READ_FIELDS:
        d = _base("poll", "ok")
        m = {"topic": "T", "queue_id": 0, "queue_offset": 0, "value": 1}
        del m[name]
        d["value"]["messages"] = [m]
        out.append((f"message requires {name}", d))
    bad = [
        ("enum type", {"type": "OK"}),
        ("enum f", {"f": "sent"}),
        ("nemesis f", {"process": -1, "type": "info"}),
        ("process < -1", {"process": -2}),
        ("index >= 0", {"index": -1}),
        ("index <= MAX_INDEX", {"index": h.MAX_INDEX + 1}),
        ("time_ns >= 0", {"time_ns": -5}),
        ("fail is definite", {"type": "fail", "definite": False}),
        ("info is indefinite", {"type": "info", "definite": True}),
        ("unknown top field", {"extra": 1}),
        ("value is an object", {"value": 17}),
        ("int32 range", {"process": 1 << 31}),
    ]
    for rule, patch in bad:
        out.append((rule, {**_base("send", "*"), **patch}))
    d = _base("fault-start", "*")
    d["type"] = "ok"
    out.append(("nemesis type", d))
    d = _base("send", "*")
    d["value"]["valu"] = 1
    out.append(("unknown value field", d))
    d = _base("poll", "ok")
    d["value"]["messages"] = [{"topic": "T", "queue_id": 0, "queue_offset": 0, "offs": 1}]
    out.append(("unknown message field", d))
    d = _base("poll", "ok")
    d["value"]["messages"] = [
        {"topic": "T", "queue_id": 0, "queue_offset": i, "value": i}
        for i in range(h.MAX_MESSAGES + 1)
    ]
    out.append(("at most MAX_MESSAGES per op", d))
    out.append(("not JSON", '{"index":0,'))
    out.append(("not an object", "[1, 2]"))
    return out


def test_every_rule_of_the_schema_is_applied_by_both_readers(spark, tmp_path, monkeypatch):
    """The drift test: the corpus is generated from rmq_ha.history's rule tables; each line
    must be refused by rmq_ha.history (as one line) and flagged by the Spark validation, and
    each rule's base line (the corpus line with the rule satisfied) accepted by both."""
    from rmq_check import validate
    from rmq_check.load import load

    monkeypatch.setattr(h, "MAX_MESSAGES", 3)  # the corpus line holds 4, not 2^20 + 1
    corpus = _corpus()
    for i, (_, x) in enumerate(corpus):
        # each line breaks its own rule only: indexes and sent values unique in the file
        if isinstance(x, dict) and x.get("index") == 0:
            x["index"] = i
        v = x.get("value") if isinstance(x, dict) else None
        if isinstance(v, dict) and type(v.get("value")) is int:
            v["value"] = 1000 + i
    lines = [x if isinstance(x, str) else json.dumps(x) for _, x in corpus]
    for (rule, _), line in zip(corpus, lines, strict=True):
        with pytest.raises((h.HistoryError, TypeError, ValueError)):
            h.Op.from_json(json.loads(line))
        assert rule
    p = tmp_path / "history.jsonl"
    p.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(validate, "SHOWN", len(lines) + 5)
    with pytest.raises(validate.HistoryInvalid) as e:
        validate.check(load(spark, p))
    flagged = {int(str(x.where).rsplit(":", 1)[1]) for x in e.value.problems}
    missed = [corpus[i][0] for i in range(len(lines)) if i + 1 not in flagged]
    assert not missed, f"rules Spark did not apply: {missed}"
    # and the base lines are accepted by both (each by its own process, invokes only)
    bases = []
    for i, (f, t) in enumerate(h.REQUIRED_VALUE_FIELDS):
        b = _base(f, t)
        if b["type"] != "invoke" and f not in h.NEMESIS_FS:
            continue
        b["index"], b["process"] = i, b["process"] if f in h.NEMESIS_FS else 100 + i
        bases.append(json.dumps(b))
    p.write_text("\n".join(bases) + "\n")
    assert len(list(h.read(p))) == len(bases)
    validate.check(load(spark, p))


def test_pairing_is_checked_by_both_readers(spark, tmp_path, monkeypatch):
    from rmq_check import validate
    from rmq_check.load import load

    def op(i: int, p: int, t: str, f: str = "poll") -> str:
        return json.dumps(
            {
                "index": i,
                "time_ns": i,
                "process": p,
                "type": t,
                "f": f,
                "value": {"topic": "T", "group": "g", "messages": []},
            }
        )

    cases = {
        "completion without invoke": [op(0, 1, "ok")],
        "two invokes": [op(0, 1, "invoke"), op(1, 1, "invoke")],
        "completion of another f": [op(0, 1, "invoke"), op(1, 1, "ok", "drain")],
        "index twice": [op(0, 1, "invoke"), op(0, 1, "ok")],
        "file order": [op(1, 1, "ok"), op(0, 1, "invoke")],
        # a completion of another send than its invoke (one send's outcome on another)
        "completion of another value": [_send(0, 1, 1), _send(1, 1, 2, "ok")],
        "completion on another topic": [
            _send(0, 1, 1),
            _send(1, 1, 1, "ok").replace('"topic": "T"', '"topic": "U"'),
        ],
        # a negative latency: the process's clock went back (probe, session 14)
        "completion before its invoke": [
            op(0, 1, "invoke").replace('"time_ns": 0', '"time_ns": 50'),
            op(1, 1, "ok").replace('"time_ns": 1', '"time_ns": 40'),
        ],
    }
    for why, lines in cases.items():
        p = tmp_path / "history.jsonl"
        p.write_text("\n".join(lines) + "\n")
        with pytest.raises(h.HistoryError):
            list(h.read(p))
        with pytest.raises(validate.HistoryInvalid, match="process 1"):
            validate.check(load(spark, p))
        assert why
    p.write_text(
        "\n".join(
            [
                op(0, 1, "invoke"),
                op(1, 2, "invoke"),
                op(2, 1, "ok"),
                op(3, 2, "info"),
                op(4, 1, "invoke"),
                # a completion naming no topic is not a mismatch
                _send(5, 3, 9),
                json.dumps(
                    {
                        "index": 6,
                        "time_ns": 6,
                        "process": 3,
                        "type": "info",
                        "f": "send",
                        "value": {"value": 9},
                    }
                ),
            ]
        )
        + "\n"
    )
    assert len(list(h.read(p))) == 7
    validate.check(load(spark, p))


def _send(i: int, p: int, v: int, t: str = "invoke") -> str:
    value: dict[str, Any] = {"topic": "T", "value": v}
    if t == "ok":
        value |= {"queue_id": 0, "queue_offset": v, "broker": "b0", "status": "SEND_OK"}
    return json.dumps(
        {"index": i, "time_ns": i, "process": p, "type": t, "f": "send", "value": value}
    )


@pytest.mark.parametrize(
    ("why", "lines", "line", "message", "flagged"),
    [
        (
            "an index two processes use",
            [_send(0, 1, 1), _send(1, 1, 1, "ok"), _send(1, 2, 2), _send(2, 2, 2, "ok")],
            3,
            "index 1 appears twice in the history",
            ["3"],
        ),
        (
            "a value two sends send",
            [_send(0, 1, 5), _send(1, 1, 5, "ok"), _send(2, 2, 5), _send(3, 2, 5, "ok")],
            3,
            "value 5 is sent twice",
            ["3"],
        ),
    ],
)
def test_history_wide_uniqueness_is_checked_by_both_readers(
    spark, tmp_path, capsys, why, lines, line, message, flagged
):
    """Indexes order deliveries (two ops with one index tie, and the key order found had no
    example to show); values name messages (a value sent twice hides a loss behind a
    duplicate). Both readers refuse such a history and name the later line."""
    from rmq_check import validate
    from rmq_check.load import load

    d, p = _run(tmp_path, lines)
    with pytest.raises(h.HistoryError, match=f":{line}: .*{message}"):
        list(h.read(p))
    with pytest.raises(validate.HistoryInvalid, match=message) as e:
        validate.check(load(spark, p))
    assert [x.where.rsplit(":", 1)[1] for x in e.value.problems] == flagged, why
    rc, out, err = check_cli(capsys, d)
    assert rc == 2 and message in err, (out, err)
    _no_trace(err)


def test_a_byte_order_mark_is_accepted_by_both_readers(spark, tmp_path, capsys):
    """Some editors start a UTF-8 file with a BOM: both readers skip it (the lost send is
    still found)."""
    from rmq_check import validate
    from rmq_check.load import load

    d, p = _run(tmp_path, _lost_send_history())
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    assert len(list(h.read(p))) == len(_lost_send_history())
    validate.check(load(spark, p))
    rc, out, _ = check_cli(capsys, d)
    assert rc == 1 and "lost" in out


def test_a_history_written_as_a_directory_of_parts_is_read(spark, tmp_path, capsys):
    """RUN/history.jsonl may be a directory of JSONL parts (as Spark writes): it is the
    history, not a run directory to look into."""
    lines = _lost_send_history()
    d = tmp_path / "run"
    parts = d / "history.jsonl"
    parts.mkdir(parents=True)
    (parts / "part-00000.jsonl").write_text("\n".join(lines[:3]) + "\n")
    (parts / "part-00001.jsonl").write_text("\n".join(lines[3:]) + "\n")
    rc, out, err = check_cli(capsys, d)
    assert rc == 1 and "lost" in out, (out, err)


@pytest.mark.parametrize("change", ["type", "extra", "no suffix", "not parquet"])
def test_every_part_of_a_parquet_history_is_checked(spark, tmp_path, capsys, change):
    """A directory of Parquet parts: Spark's schema of it is one part's footer, so a second
    part with another column type died in a Java stack trace, and one with an extra column
    was accepted. Each part is checked and named."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rmq_check.synth import Synth, generate

    generate(Synth(ops=2_000), tmp_path / "whole.parquet")
    t = pq.read_table(tmp_path / "whole.parquet")
    d = tmp_path / "run" / "history.parquet"
    d.mkdir(parents=True)
    half = t.num_rows // 2
    pq.write_table(t.slice(0, half), d / "part-00000.parquet")
    second = t.slice(half)
    name = "part-00001.parquet"
    if change in ("type", "no suffix"):
        # probe Q24: a part Spark reads though its name lacks the suffix was not checked
        i = second.schema.get_field_index("process")
        second = second.set_column(i, "process", second.column(i).cast(pa.int64()))
        name = "part-00001" if change == "no suffix" else name
    elif change == "extra":
        second = second.append_column("extra", pa.array([1] * second.num_rows))
    if change == "not parquet":  # probe Q28: a bare Py4JJavaError line
        (d / name).write_text('{"index": 0}\n')
    else:
        pq.write_table(second, d / name)
    rc, out, err = check_cli(capsys, tmp_path / "run")
    assert rc == 2, out + err
    want = f"{name}: not a Parquet file" if change == "not parquet" else f"{name}: column "
    assert want in err, err
    _no_trace(out + err)


def test_a_negative_example_count_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", str(tmp_path), "--examples", "-1"])
    assert e.value.code == 2
    assert "--examples: -1 is below 0" in capsys.readouterr().err


def test_pairing_names_the_line_and_orders_several_files_by_name(spark, tmp_path):
    """One file: the pairing sort carries the position as numbers, and the problem still
    names its line. Several files (a Parquet directory): file order is the files' names, so
    a completion in an earlier file than its invoke breaks the pairing."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rmq_check import validate
    from rmq_check.load import load
    from rmq_check.schema import SCHEMA

    def op(i: int, p: int, t: str) -> dict[str, Any]:
        return {
            "index": i,
            "time_ns": i,
            "process": p,
            "type": t,
            "f": "poll",
            "value": {"topic": "T", "group": "g", "messages": []},
        }

    p = tmp_path / "history.jsonl"
    p.write_text(
        "\n".join(json.dumps(x) for x in [op(0, 2, "invoke"), op(2, 1, "ok"), op(1, 1, "invoke")])
        + "\n"
    )
    with pytest.raises(validate.HistoryInvalid, match=r"history.jsonl:2: op 2: process 1") as e:
        validate.check(load(spark, p))
    assert "does not follow" in str(e.value)

    d = tmp_path / "parts"
    d.mkdir()

    def write(name: str, rows: list[dict[str, Any]]) -> None:
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), d / name)

    # file a holds process 1's completion, file b its invoke (index order says b first)
    write("part-a.parquet", [op(0, 2, "invoke"), op(3, 1, "ok")])
    write("part-b.parquet", [op(2, 1, "invoke"), op(4, 2, "ok")])
    with pytest.raises(
        validate.HistoryInvalid,
        match=r"part-a.parquet row 2: op 3: process 1: index 3 does not follow",
    ):
        validate.check(load(spark, d))
    write("part-a.parquet", [op(0, 2, "invoke"), op(2, 1, "invoke")])
    write("part-b.parquet", [op(3, 1, "ok"), op(4, 2, "ok")])
    validate.check(load(spark, d))


def test_a_line_that_is_not_utf8_is_refused_by_both_readers(spark, tmp_path, capsys):
    """Checker probe D1: Spark read bytes that are not UTF-8 as U+FFFD, so topics "A\\xff" and
    "A\\xfe" became one queue and a send acknowledged on one and drained from the other was
    VALID; the schema's own reader stopped with a bare UnicodeDecodeError. Both now refuse the
    line, by number."""
    d, p = _run(tmp_path, _lost_send_history())
    raw = p.read_bytes().splitlines(keepends=True)
    assert b'"T"' in raw[1]
    raw[1] = raw[1].replace(b'"T"', b'"T\xff"', 1)
    p.write_bytes(b"".join(raw))
    with pytest.raises(h.HistoryError, match=r":2: is not valid UTF-8"):
        list(h.read(p))
    rc, out, err = check_cli(capsys, d)
    assert rc == 2, out + err
    first = err.strip().splitlines()[0]
    assert f"{p}:2: " in first and "UTF-8" in first, err
    _no_trace(out + err)


@pytest.mark.parametrize("blank", ["\t", "\f", " \t \r", "\v"])
def test_a_line_of_whitespace_is_skipped_by_both_readers(spark, tmp_path, capsys, blank):
    """Checker probe D2: a line holding only a tab or a form feed was skipped by the schema's
    reader and refused ("not JSON") by Spark's, which dropped only lines of spaces. Both skip
    every line of ASCII whitespace (rmq_ha.history.BLANK)."""
    lines = _lost_send_history()
    d, p = _run(tmp_path, [lines[0], blank, *lines[1:]])
    assert len(list(h.read(p))) == len(lines)
    rc, out, err = check_cli(capsys, d)
    assert rc == 1 and "lost" in out, out + err
