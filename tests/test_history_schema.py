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
        h.Op(
            2,
            30,
            4,
            "ok",
            "poll",
            h.Value(topic="T", group="g", messages=[h.Read("T", 1, 4, 7, "k", "b0")]),
        ),
        h.Op(
            3,
            40,
            h.NEMESIS_PROCESS,
            "info",
            "fault-start",
            h.Value(fault="kill", fault_id=1, targets=["n1"]),
        ),
        h.Op(4, 50, 5, "fail", "send", h.Value(topic="T", value=8), error="boom", definite=True),
    ]
    buf = io.StringIO()
    assert h.write(buf, ops) == 5
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
            "without a value",
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
