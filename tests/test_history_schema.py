"""The shared history schema: round trips and the errors for lines that break it."""

import io

import pytest

from rmq_ha import history as h


def test_round_trip_send_poll_and_fault(tmp_path):
    ops = [
        h.Op(0, 10, 3, "invoke", "send", h.Value(topic="T", value=7, key="k")),
        h.Op(
            1,
            20,
            3,
            "ok",
            "send",
            h.Value(topic="T", value=7, queue_id=1, queue_offset=4, broker="b0", status="SEND_OK"),
            node="n1",
        ),
        h.Op(2, 25, 4, "invoke", "poll", h.Value(topic="T", group="g")),
        h.Op(
            3,
            30,
            4,
            "ok",
            "poll",
            h.Value(topic="T", group="g", messages=[h.Read("T", 1, 4, 7, "k", "b0")]),
        ),
        h.Op(
            4,
            40,
            h.NEMESIS_PROCESS,
            "info",
            "fault-start",
            h.Value(fault="kill", fault_id=1, targets=["n1"]),
        ),
        h.Op(5, 45, 5, "invoke", "send", h.Value(topic="T", value=8)),
        h.Op(6, 50, 5, "fail", "send", h.Value(topic="T", value=8), error="boom", definite=True),
    ]
    buf = io.StringIO()
    assert h.write(buf, ops) == 7
    p = tmp_path / "history.jsonl"
    p.write_text(buf.getvalue())
    assert list(h.read(p)) == ops


@pytest.mark.parametrize(
    "line, why",
    [
        (
            '{"index":0,"time_ns":1,"process":1,"type":"done","f":"send","value":{"value":1}}',
            "type",
        ),
        ('{"index":0,"time_ns":1,"process":1,"type":"ok","f":"enqueue","value":{}}', "f 'enqueue'"),
        (
            '{"index":0,"time_ns":1,"process":1,"type":"ok","f":"send","value":{}}',
            "without value.value",
        ),
        (
            '{"index":0,"time_ns":1,"process":-1,"type":"info","f":"fault-start",'
            '"value":{"fault":"meteor","fault_id":1}}',
            "fault 'meteor'",
        ),
        (
            '{"index":0,"time_ns":1,"process":1,"type":"ok","f":"send","value":{"valu":1}}',
            "unknown",
        ),
        ('{"index":0,"process":1,"type":"ok","f":"send","value":{"value":1}}', "time_ns"),
    ],
)
def test_bad_lines_are_named(tmp_path, line, why):
    p = tmp_path / "h.jsonl"
    p.write_text(
        '{"index":0,"time_ns":1,"process":1,"type":"invoke","f":"send","value":{"value":1}}\n'
        + line
        + "\n"
    )
    with pytest.raises(h.HistoryError, match=f"h.jsonl:2: .*{why}"):
        list(h.read(p))


def test_fault_stop_carries_when_the_fault_was_applied_and_healing_began(tmp_path):
    """Schema version 3 (issue 17): fault-stop's applied_ns and healing_ns round-trip; any other
    op carrying them is named as wrong."""
    stop = h.Op(
        0,
        90,
        h.NEMESIS_PROCESS,
        "info",
        "fault-stop",
        h.Value(fault="partition", fault_id=1, targets=["n1"], applied_ns=40, healing_ns=70),
    )
    p = tmp_path / "history.jsonl"
    p.write_text(h.dumps(stop) + "\n")
    assert list(h.read(p)) == [stop]
    for f, process in (("fault-start", h.NEMESIS_PROCESS), ("send", 1)):
        bad = h.Op(0, 1, process, "info", f, h.Value(fault="kill", fault_id=1, value=1))
        bad.value.healing_ns = 5
        p.write_text(h.dumps(bad) + "\n")
        with pytest.raises(h.HistoryError, match="only fault-stop carries"):
            list(h.read(p))


def test_spark_ddl_names_every_value_field_in_order():
    value = h.SPARK_DDL.split("value struct<", 1)[1]
    names = [part.split(":", 1)[0] for part in _top_level_fields(value)]
    assert names == list(h.VALUE_FIELDS)


def _top_level_fields(struct_body: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in struct_body:
        if ch == "<":
            depth += 1
        elif ch == ">":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def test_send_statuses_are_the_clients_send_status_names():
    """The history's status enum (rmq_ha.history.SEND_STATUSES) is the client's SendStatus."""
    from rmq_ha.client.message import SendStatus

    assert set(h.SEND_STATUSES) == {s.value for s in SendStatus}


@pytest.mark.parametrize(
    "line, why",
    [
        (
            '{"index":1,"time_ns":"soon","process":1,"type":"ok","f":"send","value":{"value":1}}',
            "time_ns: expected an integer, got 'soon'",
        ),
        (
            '{"index":1,"time_ns":2,"process":1,"type":"ok","f":"send","value":17}',
            "value: expected an object, got 17",
        ),
        (
            '{"index":1,"time_ns":2,"process":1,"type":"OK","f":"send","value":{"value":1}}',
            "type 'OK' is not one of",
        ),
        (
            '{"index":1,"time_ns":2,"process":1,"type":"ok","f":"send","value":{"value":1,'
            '"status":"OK"}}',
            "status 'OK' is not one of",
        ),
        (
            '{"index":1,"time_ns":2,"process":1,"type":"ok","f":"poll","value":{}}',
            "poll ok without value.messages",
        ),
        (
            '{"index":1,"time_ns":2,"process":1,"type":"ok","f":"send","value":{"value":1}',
            "not JSON",
        ),
        (
            '{"index":1,"time_ns":2,"process":2,"type":"ok","f":"send","value":{"value":1}}',
            "ok of send without an invoke",
        ),
    ],
)
def test_issue_18_lines_are_refused_with_their_line_number(tmp_path, line, why):
    p = tmp_path / "h.jsonl"
    p.write_text(
        '{"index":0,"time_ns":1,"process":1,"type":"invoke","f":"send","value":{"value":1}}\n'
        + line
    )
    with pytest.raises(h.HistoryError, match=f"h.jsonl:2: .*{why}"):
        list(h.read(p))
