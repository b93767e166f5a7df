"""Issue 20's logs: the events an operator must see each give one line at the right level, and
nothing is logged per message at INFO. A controller-mode group of real processes goes through a
master kill; the lines are read back from the processes' own logs (the default text format,
`time LEVEL logger: message`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
from rmq_jepsen.launch import Proc

from hautil import Acked, HaCluster, send_values

LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>[\w.]+): (?P<msg>.*)$")


def lines(p: Proc) -> list[tuple[str, str, str]]:
    """(level, logger, message) of each log line of `p` (continuation lines skipped)."""
    out = []
    for raw in p.log.read_text(errors="replace").splitlines():
        m = LINE.match(raw)
        if m:
            out.append((m["level"], m["logger"], m["msg"]))
    return out


def find(p: Proc, level: str, pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [msg for lv, _, msg in lines(p) if lv == level and rx.search(msg)]


@pytest.mark.timeout(180)
async def test_a_failover_logs_one_line_per_operator_event_and_nothing_per_message(
    tmp_path: Path,
) -> None:
    c = HaCluster(tmp_path)
    try:
        await c.start()
        m = await c.master()
        await c.wait_sync_state_set(m, 3)
        master = c.brokers[m]
        assert find(
            master,
            "INFO",
            r"^became master: epoch \d+, SyncStateSet \[[\d, ]+\] \(epoch \d+\), max offset \d+$",
        ), lines(master)
        for i, b in enumerate(c.brokers):
            if i != m:
                assert find(b, "INFO", r"^became slave of \d+ in epoch \d+"), lines(b)
        # The controller leader logged the election with its result and duration.
        elections = [
            msg
            for ns in c.namesrvs
            for msg in find(
                ns, "INFO", r"^election broker-a: master \d+ at \S+, epoch \d+, .* took \d+ ms$"
            )
        ]
        assert elections, c.logs()

        # 300 sends: the master's log does not grow per message at INFO.
        before = len(lines(master))
        acked = Acked()
        assert (
            await send_values(c.ns_addrs[0], "TopicLogs", [f"v{i}" for i in range(300)], acked)
            == []
        )
        grew = lines(master)[before:]
        assert len(grew) < 30, grew

        # Kill the master: the new one logs its role and epoch; the controllers log a new
        # election; a SyncStateSet change is logged by the new master once the set shrinks.
        master.kill()
        m2 = await c.master(exclude=m)
        new = c.brokers[m2]
        became = find(new, "INFO", r"^became master: epoch (\d+)")
        assert became, lines(new)
        first_epoch = int(re.search(r"epoch (\d+)", find(master, "INFO", r"^became master")[0])[1])  # type: ignore[index]
        assert int(re.search(r"epoch (\d+)", became[-1])[1]) > first_epoch  # type: ignore[index]
        after_kill = [
            msg
            for ns in c.namesrvs
            for msg in find(ns, "INFO", r"^election broker-a: master \d+ at ")
        ]
        assert len(after_kill) > len(elections), c.logs()
        await c.wait_sync_state_set(m2, 2)
        # The status shows a proposed set at once; the line comes with the controller's answer.
        with trio.move_on_after(30):
            while not find(new, "INFO", r"^SyncStateSet is now \[\d+, \d+\]"):
                await trio.sleep(0.1)
        assert find(new, "INFO", r"^SyncStateSet is now \[\d+, \d+\]"), lines(new)
        # Nothing at ERROR on the surviving brokers through a clean failover.
        for i, b in enumerate(c.brokers):
            if i != m:
                assert not [x for x in lines(b) if x[0] in ("ERROR", "CRITICAL")], lines(b)
    finally:
        c.stop()
