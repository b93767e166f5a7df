"""Issue 17: `rmq-ha campaign compare`'s figures, from what two runs wrote: time from each fault
to the first acknowledged send, availability through each fault window, the checker's anomaly
counts, and the page linking both runs' reports."""

from __future__ import annotations

import json
import types

import pytest
import trio
import trio.testing
from rmq_jepsen import syncstate
from rmq_jepsen.compare import (
    SendOp,
    anomalies,
    fault_windows,
    latency_summary,
    sends,
    svg_chart,
    write_report,
)
from rmq_jepsen.syncstate import SyncStateSampler

from rmq_ha.controller.messages import ReplicaIdentity, ReplicasInfo

pytestmark = pytest.mark.timeout(60)

S = 1_000_000_000


def test_first_acknowledged_send_after_a_fault_and_its_windows_availability():
    done = [
        SendOp(1 * S, True),
        SendOp(10 * S + 100, False),
        SendOp(11 * S, False),
        SendOp(12 * S + S // 2, True),  # the first ok 2.5 s after the fault took effect
        SendOp(13 * S, True),
        SendOp(25 * S, True),  # after the window
    ]
    faults = [
        {
            "fault_id": 1,
            "variant": "kill-master",
            "start_ns": 9 * S,
            "applied_ns": 10 * S,
            "stop_ns": 14 * S,
            "detail": "kill -9 ['broker-a-0']",
        },
        {"fault_id": 2, "variant": "pause-master", "start_ns": 30 * S, "stop_ns": 32 * S},
    ]
    w1, w2 = fault_windows(faults, done)
    assert w1["first_ok_s"] == 2.5 and w1["window_s"] == 4.0
    assert w1["ok_fraction"] == 0.5  # 2 of the 4 sends completed in the window
    assert w1["seconds_with_ok"] == 0.5  # seconds 2 and 3 of 0..3
    # no send after the second fault: no first ok, no completions to count
    assert (w2["first_ok_s"], w2["ok_fraction"], w2["seconds_with_ok"]) == (None, None, 0.0)


def test_anomaly_counts_show_the_key_analyses_and_any_invalid_one():
    results = {
        "analyses": {
            "lost": {"valid": True, "count": 0},
            "duplicated": {"valid": False, "count": 3},
            "ordering": {"valid": "unknown", "count": 0},
            "aborted-read": {"valid": False, "count": 1},
            "availability": {"valid": True, "count": 2},
        }
    }
    assert anomalies(results) == {"lost": 0, "duplicated": 3, "aborted-read": 1}
    assert anomalies({}) == {}


def _run(d, verdict, sends):
    d.mkdir(parents=True)
    faults = [{"fault_id": 1, "variant": "kill-master", "applied_ns": 2 * S, "stop_ns": 4 * S}]
    (d / "summary.json").write_text(json.dumps({"verdict": verdict, "faults": faults}))
    (d / "results.json").write_text(json.dumps({"analyses": {"lost": {"valid": True, "count": 0}}}))
    (d / "report.html").write_text("<html></html>")
    lines = []
    for i, (t, typ) in enumerate(sends):
        lines.append(
            json.dumps(
                {
                    "index": 2 * i,
                    "time_ns": t - 1,
                    "process": 0,
                    "node": None,
                    "type": "invoke",
                    "f": "send",
                    "value": {"topic": "T", "value": i},
                    "error": None,
                    "definite": None,
                }
            )
        )
        lines.append(
            json.dumps(
                {
                    "index": 2 * i + 1,
                    "time_ns": t,
                    "process": 0,
                    "node": None,
                    "type": typ,
                    "f": "send",
                    "value": {"topic": "T", "value": i},
                    "error": None,
                    "definite": None,
                }
            )
        )
    (d / "history.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_the_report_links_both_runs_and_tabulates_them(tmp_path):
    a = _run(tmp_path / "rmq_ha" / "r1", "valid", [(1 * S, "ok"), (2 * S + S // 10, "ok")])
    b = _run(
        tmp_path / "rocketmq" / "r1", "valid", [(1 * S, "ok"), (3 * S, "fail"), (3 * S + 1, "ok")]
    )
    page = write_report({"rmq_ha": a, "rocketmq": b}, tmp_path, {"seed": 7})
    text = page.read_text()
    assert 'href="rmq_ha/r1/report.html"' in text and 'href="rocketmq/r1/report.html"' in text
    data = json.loads((tmp_path / "compare.json").read_text())
    assert data["meta"] == {"seed": 7}
    ra, rb = data["runs"]["rmq_ha"], data["runs"]["rocketmq"]
    assert (ra["acknowledged_sends"], rb["acknowledged_sends"], rb["sends"]) == (2, 2, 3)
    assert ra["faults"][0]["first_ok_s"] == 0.1
    assert rb["faults"][0]["first_ok_s"] == 1.0
    assert rb["faults"][0]["ok_fraction"] == 0.5
    # latency from each send's invoke (1 ns before its completion here)
    assert ra["latency_ms"] == {"count": 2, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    assert ra["ok_per_s"] == [[1, 1], [2, 1]]
    assert text.count("<svg") == 1, "the send-rate chart; no SyncStateSet samples in these runs"
    assert "No SyncStateSet samples" in text


def _op(t, proc, typ):
    return types.SimpleNamespace(time_ns=t, process=proc, type=typ, f="send")


def test_send_latency_pairs_each_completion_with_its_processs_invoke():
    ops = [
        _op(0, 1, "invoke"),
        _op(5 * S // 1000, 2, "invoke"),
        _op(10 * S // 1000, 1, "ok"),  # 10 ms
        _op(15 * S // 1000, 1, "invoke"),
        _op(40 * S // 1000, 2, "info"),  # 35 ms, not acknowledged: not in the percentiles
        _op(45 * S // 1000, 1, "ok"),  # 30 ms
        _op(50 * S // 1000, 3, "ok"),  # no invoke seen: no latency
    ]
    done = sends(ops)
    assert [d.latency_ns for d in done] == [10 * S // 1000, 35 * S // 1000, 30 * S // 1000, None]
    assert latency_summary(done) == {"count": 2, "p50": 10.0, "p95": 30.0, "p99": 30.0, "max": 30.0}
    assert latency_summary([]) == {"count": 0}


def _info(master, in_sync, out):
    def ident(i):
        return ReplicaIdentity(broker_name="g", broker_id=i, broker_address=f"a:{i}", alive=True)

    return ReplicasInfo(
        master_broker_id=None if master is None else 0,
        master_address=master,
        master_epoch=3,
        sync_state_set_epoch=5,
        in_sync_replicas=tuple(ident(i) for i in in_sync),
        not_in_sync_replicas=tuple(ident(i) for i in out),
    )


def test_time_from_a_heal_until_the_sync_state_set_is_full_again(tmp_path):
    """The controller's samples (syncstate.jsonl, written by the sampler the runner starts):
    the first sample at or after the heal with a master and nobody out of sync, per group."""
    answers = iter(
        [
            {"g": _info("a:0", [0, 1, 2], [])},
            {"g": _info("a:0", [0], [1, 2])},  # the fault
            {},  # nobody answered
            {"g": _info("a:1", [1, 2], [0])},  # healed at 3 s, old master not back yet
            {"g": _info("a:1", [0, 1, 2], [])},  # full again at 4 s
        ]
    )
    clock = iter(range(0, 10 * S, S))

    async def replicas():
        return next(answers)

    out = tmp_path / "syncstate.jsonl"
    sampler = SyncStateSampler(replicas, out, lambda: next(clock), last_error=lambda: "refused")

    async def main():
        with open(out, "a") as f:
            for _ in range(5):
                f.write(json.dumps(await sampler.one()) + "\n")
            f.write('{"time_ns": 9')  # a torn last line (a killed run) is dropped

    trio.run(main)
    samples = syncstate.read(out)
    assert len(samples) == 5 and samples[2] == {"time_ns": 2 * S, "error": "refused"}
    assert samples[1]["groups"]["g"] == {
        "master": "a:0",
        "epoch": 3,
        "in_sync": [0],
        "out_of_sync": [1, 2],
    }
    assert sampler.summary()["failed"] == 1
    assert syncstate.full_again_s(samples, 3 * S, ["g"]) == 1.0
    assert syncstate.full_again_s(samples, 0, ["g"]) == 0.0
    assert syncstate.full_again_s(samples, 0, ["g", "other"]) is None, "every group must be full"
    assert syncstate.full_again_s(samples, 5 * S, ["g"]) is None
    faults = [{"fault_id": 1, "variant": "pause-master", "applied_ns": S, "stop_ns": 3 * S}]
    (w,) = fault_windows(faults, [], samples, ["g"])
    assert w["full_sss_s"] == 1.0


def test_the_chart_draws_every_series_on_one_pair_of_axes_with_the_fault_bands():
    svg = svg_chart(
        {"rmq_ha": [(0, 10), (1, 20)], "rocketmq": [(0, 5), (2, 40)]},
        [(0.5, 1.5)],
        "t",
        "y",
        step=True,
    )
    assert svg.count("<polyline") == 3  # the axes and one line per database
    assert svg.count("<rect") == 1 and ">rmq_ha<" in svg and ">rocketmq<" in svg
    # a step line holds the previous value until the next point: 2 points -> 3 vertices
    lines = [p for p in svg.split("<polyline")[2:]]
    assert all(line.split('points="')[1].split('"')[0].count(",") == 3 for line in lines)


def test_a_run_ends_by_waiting_for_every_sync_state_set_to_be_full_again(tmp_path):
    """Faults undone (`healed`) is not recovery: the runner asks the controllers after the
    drain until every group's SyncStateSet is full, and says which group is not and why when
    the wait runs out (a replica left out of sync after a clock jump ended `healed: true`)."""
    from rmq_jepsen.cli import replication_text

    def run(answers, expect, timeout_s):
        it = iter(answers)

        async def replicas():
            a = next(it)
            return a[-1] if isinstance(a, list) else a

        sampler = SyncStateSampler(replicas, tmp_path / "s.jsonl", lambda: 0, interval_s=0.5)

        async def main():
            return await syncstate.wait_full(sampler, expect, timeout_s)

        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    # out of sync, then nobody answers, then full: done at the third look
    got = run([{"g": _info("a:0", [0], [1])}, {}, {"g": _info("a:0", [0, 1], [])}], ["g"], 10)
    assert got["full"] and got["not_full"] == {} and got["waited_s"] == 1.0
    assert replication_text({"replication": got}) == "replication: full"
    # never full: the wait ends at the timeout and names each group's reason
    stuck = {"g": _info("a:0", [0], [2]), "h": _info("", [1], [])}
    got = run([stuck] * 100, ["g", "h", "missing"], 3)
    assert not got["full"] and got["waited_s"] == 3.0
    assert got["not_full"] == {
        "g": "replicas [2] out of sync",
        "h": "no master",
        "missing": "the controller does not know the group",
    }
    text = replication_text({"replication": got})
    assert text is not None and text.startswith("replication: NOT full 3.0 s after the drain")
    assert "g: replicas [2] out of sync" in text and "h: no master" in text
    got = run([{}] * 100, ["g"], 1)
    assert not got["full"] and got["not_full"]["g"].startswith("no controller answered")
    assert replication_text({}) is None  # no controllers in the run


async def test_a_classic_group_is_settled_when_its_master_shows_every_slave_caught_up(tmp_path):
    """Classic topologies have no SyncStateSet: the bench asks each group's configured master
    for GET_BROKER_HA_STATUS (HARuntimeInfo) and calls the group settled when every
    configured slave is connected with nothing left to receive. A classic run whose slaves
    never resynced ended `healed: true` and nothing said so (probe)."""
    from rmq_jepsen.control import Control, Host
    from rmq_jepsen.db import DB, TOPOLOGIES, ClusterView
    from rmq_jepsen.state import StateDir
    from rmq_jepsen.syncstate import wait_settled

    from rmq_ha.net.server import RemotingServer
    from rmq_ha.protocol.codes import RequestCode as RC
    from rmq_ha.protocol.codes import ResponseCode as Resp

    answers = [
        {"master": True, "masterCommitLogMaxOffset": 900, "haConnectionInfo": [
            {"addr": "s1", "diff": 0}, {"addr": "s2", "diff": 300}]},
        {"master": True, "masterCommitLogMaxOffset": 900, "haConnectionInfo": [
            {"addr": "s1", "diff": 0}, {"addr": "s2", "diff": 0}]},
    ]  # fmt: skip
    asked = []

    async def handler(conn, cmd):
        assert cmd.code == RC.GET_BROKER_HA_STATUS
        asked.append(cmd.code)
        body = answers[min(len(asked), len(answers)) - 1]
        return cmd.response(Resp.SUCCESS, None, None, json.dumps(body).encode())

    hosts = [Host(f"n{i}", "127.0.0.1", workdir=str(tmp_path / f"n{i}")) for i in (1, 2, 3)]
    db = DB(Control(hosts), TOPOLOGIES["classic"], state=StateDir(tmp_path / "state"))
    view = ClusterView(db)
    async with trio.open_nursery() as n:
        server = RemotingServer(handler)
        await n.start(server.serve)
        (group,) = db.groups()
        for r in db.brokers():
            if r.replica == 0:
                r.port = server.port

        async def lag():
            why = await view.classic_lag()
            return why, {"lag": why}

        got = await wait_settled(lag, 30, interval_s=0.01)
        assert got["full"] and got["not_full"] == {} and len(asked) == 2
        first = await view.classic_lag()  # not reached yet: the first answer again
        assert first == {}
        answers[:] = [{"master": False}]
        assert "is not master" in (await view.classic_lag())[group]
        server.port = 1  # nobody there
        for r in db.brokers():
            if r.replica == 0:
                r.port = 1
        assert "does not answer" in (await view.classic_lag())[group]
        n.cancel_scope.cancel()
