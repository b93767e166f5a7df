"""The broker-group simulator (rmq_ha.sim.group, issue 14): thousands of seeded fault schedules
against three replicas built from the real RoleCore and HaCore and the real controller rules;
a seed replays exactly; the checker catches a deliberately broken rule for each invariant; and
the bugs the simulator found in the real code are pinned, either fixed (with pure tests below)
or as strict xfails that run a failing seed without the simulator's workaround."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from rmq_ha._native import EpochFile
from rmq_ha.broker.core import actions as a
from rmq_ha.broker.core import events as e
from rmq_ha.broker.core.role import HAND_BACK_HOLD_MS, Role, RoleConfig, RoleCore
from rmq_ha.broker.ha.core import consistent_point
from rmq_ha.broker.offsets import ConsumerOffsetManager
from rmq_ha.errors import StoreError
from rmq_ha.sim.acting import FIX_REVERTS, ActingResult, run_acting_seed
from rmq_ha.sim.acting import replay_command as acting_replay
from rmq_ha.sim.acting_cli import main as acting_main
from rmq_ha.sim.acting_cli import run_acting_seeds
from rmq_ha.sim.acting_cli import summarize as acting_summary
from rmq_ha.sim.group import (
    BUGS,
    EpochConflict,
    GroupConfig,
    GroupResult,
    MemEpochs,
    replay_command,
    run_group_seed,
)
from rmq_ha.sim.group_cli import main, percentile, run_group_seeds, summarize

SEEDS = int(os.environ.get("GROUP_SIM_SEEDS", "2000"))


def _failures(results: list[GroupResult], bug: str | None = None) -> list[str]:
    return [
        f"seed {r.seed}: {r.error}\n  replay: {replay_command(r.seed, bug)}"
        for r in results
        if not r.ok
    ]


@pytest.mark.timeout(240)
def test_group_seeds_keep_the_invariants() -> None:
    jobs = min(2, os.cpu_count() or 1)
    started = time.perf_counter()
    results = run_group_seeds(range(SEEDS), jobs)
    print(summarize(results, time.perf_counter() - started, jobs))
    failed = _failures(results)
    assert not failed, "\n".join(failed)
    if SEEDS < 2000:
        return
    # Both configurations ran, and the faults the invariants must survive did happen.
    assert {r.min_in_sync for r in results} == {1, 2}
    assert sum(r.crashes for r in results) > SEEDS
    assert sum(r.torn for r in results) > SEEDS // 4
    assert sum(r.truncations for r in results) > SEEDS // 10
    assert sum(r.debts for r in results) > 0
    assert sum(r.recovery_elections for r in results) > 0
    assert sum(r.acked for r in results) > 20 * SEEDS
    # A failover was measured in nearly every seed (the master fault can hit no master).
    assert sum(r.failover_ms is not None for r in results) > SEEDS * 9 // 10
    # Consumer offsets: committed, copied by slaves, and checked at each takeover.
    assert sum(r.offset_commits for r in results) > 20 * SEEDS
    assert sum(r.offset_syncs for r in results) > 3 * SEEDS
    assert sum(r.offset_takeovers for r in results) > 2 * SEEDS


def test_a_group_seed_replays_exactly() -> None:
    first = run_group_seed(7, trace=True)
    second = run_group_seed(7, trace=True)
    assert first.ok and second.ok
    assert first.trace == second.trace
    assert (first.events, first.sim_ms, first.acked, first.failover_ms) == (
        second.events,
        second.sim_ms,
        second.acked,
        second.failover_ms,
    )


#: Issue 13's crash loop as a seed: the master is killed; the replica elected in its place
#: loses power right after (40 ms: before a slave rejoined its SyncStateSet, which a handshake
#: does at once), before flushing what it held, so its log ends below the start of its own
#: epoch (it owes a catch-up) and it was the set's only member; it must not lead again, and a
#: recovery election gives the group a master.
ISSUE_13 = (
    GroupConfig(min_in_sync_replicas=1, flush_ms=3000, loss=0.0),
    [
        (1500, "kill", 0),
        (1540, "power-flushed", 0),
    ],
)


def test_issue_13_a_new_master_that_lost_its_tail_is_replaced() -> None:
    cfg, script = ISSUE_13
    result = run_group_seed(3, cfg=cfg, script=script)
    assert result.ok, result.error
    assert result.debts == 1 and result.torn == 1
    assert result.recovery_elections == 1
    assert result.failover_ms is not None


# ---- the checker catches a broken rule, one per invariant -----------------------------------


@pytest.mark.parametrize(
    ("bug", "symptom"),
    [
        # No acknowledged write is lost: acks that do not wait for the SyncStateSet.
        ("ack-ignores-replication", "acknowledged write(s) lost"),
        # One broker acknowledges writes per epoch: a new master that keeps the old epoch.
        ("lead-keeps-old-epoch", "two brokers acknowledged writes in epoch"),
        # Members are prefixes of the master up to its confirm offset: no handshake truncation.
        ("skip-truncation", "the master's bytes below it|is not a prefix of master"),
        # The confirm offset covers only what every member holds: confirm ignoring the acks.
        ("confirm-ignores-acks", "confirm offset went beyond a member"),
        # The confirm offset never goes back: a handshake that cuts more than it must.
        ("over-truncation", "confirm offset went back"),
    ],
)
def test_checker_catches_a_broken_core(bug: str, symptom: str) -> None:
    results = run_group_seeds(range(30), jobs=1, bug=bug)
    errors = [r.error or "" for r in results if not r.ok]
    assert errors, f"the group checker missed the {bug} bug in 30 seeds"
    assert all(e.startswith(("GroupViolation", "InvariantViolation")) for e in errors), errors
    assert any(any(s in e for s in symptom.split("|")) for e in errors), errors


def test_checker_catches_an_election_that_ignores_catch_up_debts() -> None:
    """Liveness: a controller that elects a replica owing a catch-up (issue 13) elects it again
    and again; the replica refuses to lead, and the group never gets a master."""
    cfg, script = ISSUE_13
    result = run_group_seed(3, "elect-ignores-catch-up", cfg=cfg, script=script)
    assert not result.ok
    assert result.error is not None and "liveness" in result.error


def test_checker_catches_a_demoted_master_that_drops_its_own_offsets() -> None:
    """An offset never goes backwards after a committed update survived a failover: a
    master demoted without a restart whose metadata sync takes the new master's older table
    whole (over the commits it acknowledged itself) serves again without them. It takes a
    demoted master elected again before the consumer commits that queue anew: seed 1713,
    the first of 0-3999 since session 17's election rule (a new master must have heard the
    controller lately) changed which replicas are elected; it was seed 38 before (the correct
    code keeps them: `merge_from_json` keeps its own commits while they are ahead of the
    master's)."""
    assert run_group_seed(1713).ok
    result = run_group_seed(1713, "sync-overwrites-own-commits")
    assert not result.ok and result.error is not None
    assert "consumer offset went back" in result.error


def test_a_consumers_own_commit_sets_the_offset_also_before_its_replica_serves() -> None:
    """Seed 7618 (of a 2,000-7,999 sweep) once failed on the checker, not the broker: a
    restarted consumer read an older offset from the new master and committed it to a demoted
    master about to serve again, which took it; the consumer's own commit sets the value."""
    result = run_group_seed(7618)
    assert result.ok, result.error


def test_bugs_are_listed_and_failures_print_their_replay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert set(BUGS) == {
        "ack-ignores-replication",
        "confirm-ignores-acks",
        "lead-keeps-old-epoch",
        "skip-truncation",
        "over-truncation",
        "elect-ignores-catch-up",
        "sync-overwrites-own-commits",
    }
    assert main(["--group", "--seeds", "4", "--jobs", "1", "--group-bug", "over-truncation"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: GroupViolation" in out
    assert (
        "reproduce: python -m rmq_ha.sim --group --seed 0 --group-bug over-truncation --trace"
        in out
    )
    assert main(["--group", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "seed 0 (minInSyncReplicas=1): ok" in out


def test_the_cli_reports_the_failover_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--group", "--seeds", "6", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "6/6 broker-group seeds passed" in out
    assert "all: n=" in out and "p99" in out
    assert percentile([5, 1, 3], 0.5) == 3 and percentile([5, 1, 3], 0.99) == 5
    # --failover: the fault on the master only, for a clean distribution.
    assert main(["--group", "--failover", "--seeds", "4", "--jobs", "1"]) == 0
    assert "4/4 broker-group seeds passed" in capsys.readouterr().out


# ---- bugs the simulator found in the real code ---------------------------------------------
#
# Each of these seeds failed on the real code before its fix (all are fixed now). A bug found
# later and not fixed at once goes into `group.KNOWN_BUGS` with a workaround the main seeds
# run with, plus a strict xfail here that runs a failing seed without it. (A change to how
# the simulator draws its random numbers moves failures to other seeds: find them with
# `python -m rmq_ha.sim --group --no-fixes --seeds N`.) The known limits below are
# documented behaviour (docs/ha.md), pinned the same way.


def test_the_confirm_offset_waits_for_every_member_that_acked() -> None:
    """Once a known bug (seeds 0, 1, 3 failed): HaCore skipped members whose ack was <= 0 and
    the master did not feed the handshake's ack, so the confirm offset passed bytes a member
    lacked and slaves later cut consumer-visible messages. Now the handshake's ack is fed at
    once and only a connection with no ack at all (-1) is skipped."""
    for seed in (0, 1, 3):
        result = run_group_seed(seed)
        assert result.ok, result.error


def test_a_write_is_never_acknowledged_after_its_bytes_were_cut() -> None:
    """Once a known bug (these seeds lost 19, 5, 17 and 3 acknowledged writes; 2497 with
    minInSyncReplicas=2): a producer's wait read whatever HaCore the role core had, so a
    master demoted, cut back by its handshake and elected again acknowledged the old write.
    HaMaster.wait_acked now ends unacknowledged when its HaCore is replaced or leads another
    epoch."""
    for seed in (280, 842, 2410, 2497):
        result = run_group_seed(seed)
        assert result.ok, result.error


def test_a_restarted_master_gets_a_new_epoch() -> None:
    """Once a known bug (slaves' handshakes cut bytes below their confirm offset in these
    seeds): a master restarted before the controller noticed was named master of its old
    epoch and appended it again at its max offset. It now asks for a new epoch, and the
    controller re-elects a master that asks."""
    for seed in (878, 944, 1293):
        result = run_group_seed(seed)
        assert result.ok, result.error


def test_a_slave_syncs_behind_an_empty_master_of_the_first_epoch() -> None:
    """Once a known bug (seed 1787, minInSyncReplicas=2: no write acknowledged again): an
    empty replica elected at the start of the first epoch replaces that entry (#9689), the
    slave shares no epoch with it and SUSPENDed for ever. `consistent_point` now agrees at
    the start both logs share when the master holds nothing past it."""
    result = run_group_seed(1787)
    assert result.min_in_sync == 2
    assert result.ok, result.error


def test_consistent_point_with_an_empty_master_of_the_first_epoch() -> None:
    assert consistent_point([(1, 0)], 500, [(2, 0)], 0) == 0
    assert consistent_point([(1, 4096)], 500, [(2, 4096)], 4096) == 4096
    # A master holding bytes, or starting elsewhere, still has no point with it.
    assert consistent_point([(1, 0)], 500, [(2, 0)], 10) is None
    assert consistent_point([(1, 0)], 500, [(2, 64)], 64) is None


@pytest.mark.xfail(
    strict=True,
    reason="a replica that loses acknowledged bytes above its checkpointed confirm offset "
    "and its last epoch's start in a power loss owes no catch-up and may be elected (it was "
    "the old master and came back, or the members that hold the bytes are down); the others "
    "then cut those writes at their handshake. docs/ha.md documents it for slaves; it holds "
    "for masters too and with minInSyncReplicas=2, which the main seeds excuse and count "
    "(torn_leader_losses)",
)
def test_known_limit_min_in_sync_2_loses_writes_when_a_torn_replica_leads() -> None:
    for seed in (17, 21, 95, 149):
        result = run_group_seed(seed)
        assert result.ok and result.min_in_sync == 2
        assert result.torn_leader_losses == 0


# ---- pure tests of the fixes to the real code ----------------------------------------------

ADDR = "10.0.0.2:10911"


def _restarted(last_epoch: int, last_start: int, max_offset: int) -> RoleCore:
    core = RoleCore(RoleConfig(controller_mode=True))
    core.step(e.Started(ADDR, max_offset, 0, last_epoch, last_start), 0)
    core.step(e.IdAssigned(2), 0)
    return core


def _info(master: int, epoch: int, members: set[int], ss: int) -> e.MasterInfo:
    return e.MasterInfo(master, f"10.0.0.{master}:10911", epoch, ss, frozenset(members), "register")


def test_a_slave_moved_to_another_master_stops_following_the_old_one() -> None:
    """Found by the group simulator: FindMasterHa looks for the new master only while nothing
    is followed, so a slave of 1 told that 3 is master kept following 1 (until a name
    server's answer named 3; in the simulator, which has none, for ever)."""
    core = _restarted(last_epoch=1, last_start=0, max_offset=100)
    core.step(_info(1, 2, {1}, 3), 10)
    assert core.step(e.MasterHaFound(2, "10.0.0.1:10912"), 11) == [a.Follow("10.0.0.1:10912")]
    out = core.step(_info(3, 3, {3}, 4), 12)
    assert a.Follow(None) in out and a.FindMasterHa("10.0.0.3:10911", 3) in out
    assert core.state.following is None
    assert core.step(e.MasterHaFound(3, "10.0.0.3:10912"), 13) == [a.Follow("10.0.0.3:10912")]


def test_a_master_restarted_in_its_own_epoch_asks_for_a_new_one() -> None:
    """Found by the group simulator: named master of the epoch it led before its restart, a
    broker appended that epoch again at its max offset (its earlier bytes of the epoch moved
    into the previous one, and its slaves cut them at their handshake). It now stays fenced
    and asks for an election; the controller re-elects it in a new epoch."""
    core = _restarted(last_epoch=3, last_start=100, max_offset=150)
    out = core.step(_info(2, 3, {2}, 5), 10)
    assert a.RequestElection() in out
    assert not any(isinstance(x, a.AppendEpoch) for x in out)
    assert core.state.role is not Role.MASTER and core.state.fence is not None
    out = core.step(_info(2, 4, {2}, 6), 20)
    assert a.AppendEpoch(4, 150) in out and core.state.role is Role.MASTER


class _FakeNative:
    def __init__(self, max_offset: int) -> None:
        self.max_offset = max_offset
        self.confirm_offset = max_offset

    def truncate_to(self, offset: int) -> None:
        self.max_offset = min(self.max_offset, offset)
        self.confirm_offset = min(self.confirm_offset, offset)


class _FakeStore:
    def __init__(self, max_offset: int) -> None:
        self.native = _FakeNative(max_offset)


def test_a_slave_tells_the_role_core_when_its_handshake_cut_the_log(tmp_path: Path) -> None:
    """Found by the group simulator: the core kept the pre-truncation max offset, reported it
    in heartbeats (so the controller elected on it) and, elected, started its epoch past its
    log's end; writes then went into the previous epoch."""
    from rmq_ha.broker.ha.slave import HaSlave

    epochs = EpochFile(tmp_path / "epochs")
    epochs.append(1, 0)
    epochs.append(2, 300)
    store = _FakeStore(500)
    slave = HaSlave(
        store,  # type: ignore[arg-type]
        epochs,
        lambda: 2,
        async_learner=False,
        sync_from_last_file=False,
        heartbeat_interval_ms=1000,
        housekeeping_ms=3000,
        controller_mode=True,
    )
    seen: list[e.Event] = []
    slave.on_event = seen.append
    slave._truncate(400, [(1, 0), (3, 200)])
    assert store.native.max_offset == 200
    assert seen == [e.LogGrew(200, 200)]


# ---- the in-memory epoch file follows the real one ------------------------------------------


def test_mem_epochs_follow_the_native_epoch_file(tmp_path: Path) -> None:
    rng = random.Random(14)
    for round_ in range(20):
        real = EpochFile(tmp_path / f"e{round_}")
        mem = MemEpochs()
        for _ in range(25):
            op = rng.choice(("append", "append", "by-epoch", "by-offset", "reconcile"))
            epoch, offset = rng.randint(1, 12), rng.randint(0, 400)
            if op == "append":
                try:
                    real.append(epoch, offset)
                    real_ok = True
                except StoreError:
                    real_ok = False
                try:
                    mem.append(epoch, offset)
                    mem_ok = True
                except EpochConflict:
                    mem_ok = False
                assert real_ok == mem_ok, (op, epoch, offset)
            elif op == "by-epoch":
                real.truncate_suffix_by_epoch(epoch)
                mem.truncate_suffix_by_epoch(epoch)
            elif op == "by-offset":
                real.truncate_suffix_by_offset(offset)
                mem.truncate_suffix_by_offset(offset)
            else:
                cut, _ = real.reconcile(0, offset)
                assert mem.reconcile(offset) == cut
            assert [(x, s) for x, s, _ in real.entries()] == mem.entries
            for probe in (0, offset, offset + 1, 399):
                assert real.find_by_offset(probe) == _norm(mem.find_by_offset(probe)), probe


def _norm(found: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    if found is None or found[2] < 2**63:
        return found
    return (found[0], found[1], 2**64 - 1)


# ---- slave acting master (RIP-32), pre-online, FMQ: rmq_ha.sim.acting --------------------

ACTING_SEEDS = int(os.environ.get("ACTING_SIM_SEEDS", "1000"))


def _acting_failures(results: list[ActingResult]) -> list[str]:
    return [
        f"seed {r.seed}: {r.error}\n  replay: {acting_replay(r.seed)}" for r in results if not r.ok
    ]


@pytest.mark.timeout(240)
def test_acting_master_seeds_keep_the_invariants() -> None:
    jobs = min(2, os.cpu_count() or 1)
    started = time.perf_counter()
    results = run_acting_seeds(range(ACTING_SEEDS), jobs)
    print(acting_summary(results, time.perf_counter() - started, jobs))
    failed = _acting_failures(results)
    assert not failed, "\n".join(failed)
    if ACTING_SEEDS < 1000:
        return
    # Both group sizes and both fencing modes ran, and what the invariants guard did happen.
    assert {r.replicas for r in results} == {2, 3}
    assert {r.fence for r in results} == {True, False}
    assert {r.master_fault for r in results} == {"kill", "isolate", "isolate-ns", "pause"}
    assert sum(r.takeovers for r in results) > ACTING_SEEDS
    assert sum(r.hand_backs for r in results) > ACTING_SEEDS
    assert sum(r.pre_onlines for r in results) > ACTING_SEEDS // 2
    assert sum(r.reverse_syncs for r in results) > ACTING_SEEDS
    assert sum(r.commits for r in results) > 50 * ACTING_SEEDS
    assert sum(r.locks_granted for r in results) > 10 * ACTING_SEEDS
    assert sum(r.delay_deliveries for r in results) > 30 * ACTING_SEEDS
    assert sum(r.takeover_ms is not None for r in results) > ACTING_SEEDS // 2


def test_an_acting_seed_replays_exactly() -> None:
    first = run_acting_seed(11, trace=True)
    second = run_acting_seed(11, trace=True)
    assert first.ok and second.ok
    assert first.trace == second.trace
    assert (first.events, first.commits, first.takeover_ms) == (
        second.events,
        second.commits,
        second.takeover_ms,
    )


@pytest.mark.parametrize(
    ("bug", "symptom"),
    [
        # A returning master never goes online before pre-online completes.
        ("online-without-reverse-sync", "pre-online: the master went online without"),
        # A fenced broker serves nothing master-only.
        ("fenced-keeps-services", "fencing: b0 is fenced but runs the special services"),
        # No acknowledged metadata update lost (and offsets never go backwards).
        ("merge-takes-theirs", "lost offset"),
        # Pre-online never moves delay progress backwards.
        ("delay-merge-takes-theirs", "delay progress went back"),
        # At most one broker serves master-only operations.
        ("never-stops-acting", "split brain"),
        # A strict-mode queue lock is held by at most one client.
        ("strict-lock-without-quorum", "strict lock held by two clients"),
    ],
)
def test_acting_checker_catches_a_broken_rule(bug: str, symptom: str) -> None:
    results = run_acting_seeds(range(30), jobs=1, bug=bug)
    errors = [r.error for r in results if not r.ok]
    assert errors, f"the acting-master checker missed the {bug} bug in 30 seeds"
    assert all(e.startswith("ActingViolation") for e in errors), errors
    assert any(symptom in e for e in errors), errors


#: The bugs of the real code the acting-master simulator found, each fixed: seeds that find it
#: pass, and fail again with the fix reverted (`acting.FIX_REVERTS`). Later fixes also cover
#: some earlier bugs, so the seeds were found again against the final code with only that one
#: fix reverted. Two fixes are shown otherwise: copy-after-hand-back by its excused-loss count
#: (below), and repull-on-reconnect (found by seed 1274 of an intermediate version) by its pure
#: test only: with the final code no seed in 0-4,999 fails with it reverted.
FOUND = [
    ("stop-acting-on-906", (0, 1), "pre-online"),
    ("hand-back-while-online", (12, 19), "split brain|lost offset|delay progress went back"),
    ("acting-slave-silence", (49, 240), "split brain"),
    ("fence-on-name-server-silence", (32, 35), "split brain"),
    ("merge-keeps-max", (37, 61), "lost offset"),
    ("sync-keeps-own-commits", (198, 253), "lost offset"),
    ("repush-before-pull", (236, 966), "pre-online"),
    ("remember-transfer", (157, 167), "liveness: b"),
    ("repush-on-connect", (2155,), "pre-online"),
    ("pre-online-follows-pusher", (2277,), "pre-online"),
    ("fence-without-slave", (1030,), "split brain"),
    ("unfence-when-listed", (9901,), "split brain"),
    ("fence-check-every-event", (11070,), "split brain"),
    ("probe-before-acting", (1478, 2649), "pre-online"),
    ("delay-merge-keeps-max", (8, 79), "delay progress went back"),
    ("delay-sync-keeps-own-progress", (54, 198), "delay progress went back"),
]


@pytest.mark.parametrize(("fix", "seeds", "symptom"), FOUND)
def test_acting_bugs_found_stay_fixed(fix: str, seeds: tuple[int, ...], symptom: str) -> None:
    for seed in seeds:
        fixed = run_acting_seed(seed)
        assert fixed.ok, f"seed {seed}: {fixed.error}\n  replay: {acting_replay(seed)}"
        broken = run_acting_seed(seed, revert=fix)
        assert not broken.ok, f"seed {seed} passes with the {fix} fix reverted"
        assert any(s in broken.error for s in symptom.split("|")), broken.error


def test_a_slave_copies_offsets_only_after_the_masters_906() -> None:
    """The one fix whose loss the checker excuses (a killed master's unpersisted commits whose
    only copy, on a slave, is overwritten before the restarted master pulls it: counted, not
    fixed in every case): seed 657 loses 7 such updates with the fix reverted (4 offset
    commits and, since delay progress is modelled, 3 of it), none with it."""
    assert run_acting_seed(657).copy_losses == 0
    assert run_acting_seed(657, revert="copy-after-hand-back").copy_losses == 7


def test_acting_cli_replays_a_seed_and_names_failures(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(FIX_REVERTS) == {f for f, _, _ in FOUND} | {
        "copy-after-hand-back",
        "repull-on-reconnect",
    }
    assert acting_main(["--acting", "--seed", "2"]) == 0
    assert "seed 2 (" in capsys.readouterr().out
    assert (
        acting_main(["--acting", "--seed", "32", "--revert", "fence-on-name-server-silence"]) == 1
    )
    assert "FAILED: ActingViolation: split brain" in capsys.readouterr().out
    assert acting_main(["--acting", "--seeds", "3", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "3/3 acting-master seeds passed" in out and "takeovers" in out


# ---- the fixed rules, pure ----------------------------------------------------------------


def _classic(bid: int, **kw: object) -> RoleCore:
    core = RoleCore(
        RoleConfig(controller_mode=False, broker_id=bid, classic_slave=bid != 0, **kw)  # type: ignore[arg-type]
    )
    core.step(e.Started(f"10.0.0.{bid}:10911", 0, 0, 1, 0), 0)
    return core


def _names(actions: list[a.Action]) -> list[str]:
    return [type(x).__name__ for x in actions if not isinstance(x, a.Log)]


def test_an_acting_slave_stops_on_the_returning_masters_906_and_waits_for_it() -> None:
    core = _classic(1, acting_master=True)
    core.step(e.MinBrokerChanged(1, "10.0.0.1:10911", offline_addr="m:0"), 10)
    assert core.acting
    out = core.step(e.MasterPushedHa("m:0", "m:ha"), 100)
    assert _names(out) == ["StopSpecial", "Follow"] and not core.acting
    # The master is in pre-online, not registered: the name servers still lack it.
    assert _names(core.step(e.MemberGroup({1: "10.0.0.1:10911"}), 1_000)) == []
    assert not core.acting
    # Online: a view that lists the master ends the hold.
    core.step(e.MemberGroup({0: "m:0", 1: "10.0.0.1:10911"}), 2_000)
    assert core.state.hand_back_until_ms is None
    # A 906 also holds a slave that never noticed the master had died (seed 605) ...
    core.step(e.MasterPushedHa("m:0", "m:ha"), 3_000)
    assert _names(core.step(e.MemberGroup({1: "10.0.0.1:10911"}), 4_000)) == []
    # ... and a master that never comes online is acted for once the hold is over.
    out = core.step(e.MemberGroup({1: "10.0.0.1:10911"}), 3_000 + HAND_BACK_HOLD_MS)
    assert "StartSpecial" in _names(out) and core.acting


def test_a_master_hands_back_a_slave_it_has_not_pulled() -> None:
    core = _classic(0, acting_master=True)
    out = core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 10)
    assert out[-1] == a.PushHaInfo(1, "s:1")
    assert core.step(e.HaInfoPushed(1, True), 20) == [a.ReverseSync(1, "s:1")]
    assert core.step(e.ReverseSynced(1, True), 30) == []
    assert core.state.pulled == {1}
    assert _names(core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 1_000)) == []
    # A long name-server silence: it may have been dropped and slave 1 may have acted.
    out = core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 10_000)
    # ... and its delay progress may be newer: the special services wait for the hand-back
    assert _names(out) == ["PushHaInfo", "StopSpecial"] and core.state.pulled == set()
    core.step(e.HaInfoPushed(1, True), 10_010)
    assert _names(core.step(e.ReverseSynced(1, True), 10_020)) == ["StartSpecial"]


def test_an_acting_slave_stops_when_it_hears_no_name_server() -> None:
    core = _classic(1, acting_master=True, fence_when_isolated=True, isolation_timeout_ms=10_000)
    core.step(e.MinBrokerChanged(1, "10.0.0.1:10911", offline_addr="m:0"), 10)
    core.step(e.NamesrvAnswered(), 100)
    assert _names(core.step(e.Tick(), 5_100)) == [] and core.acting
    assert _names(core.step(e.Tick(), 5_101)) == ["StopSpecial"] and not core.acting
    # A name server's view makes it act again.
    out = core.step(e.MemberGroup({1: "10.0.0.1:10911"}), 6_000)
    assert "StartSpecial" in _names(out) and core.acting


def test_with_acting_master_a_master_fences_on_name_server_silence_alone() -> None:
    core = _classic(0, acting_master=True, fence_when_isolated=True, isolation_timeout_ms=10_000)
    core.step(e.SlaveConnected(1, False), 0)
    core.step(e.NamesrvAnswered(), 0)
    for t in range(1_000, 6_000, 1_000):
        core.step(e.SlaveAcked(1, 0, 0), t)  # a slave still follows it
    assert not core.data_plane_fenced
    assert _names(core.step(e.Tick(), 5_001)) == ["StopSpecial"] and core.data_plane_fenced


def test_pre_online_merge_keeps_the_larger_offset_whatever_the_versions(tmp_path: Path) -> None:
    master = ConsumerOffsetManager(tmp_path / "m.json", version_step=1)
    slave = ConsumerOffsetManager(tmp_path / "s.json", version_step=1)
    slave.merge_from_json(master.to_json())
    for i in range(5):
        master.commit("g", "T", 0, i)  # after the slave's last copy: 5 version bumps
    slave.commit("g", "T", 1, 9)  # the slave acts: one bump, an older-looking version
    assert slave.data_version.compare(master.data_version) < 0
    assert master.merge_newer(slave.to_json())
    assert master.query("g", "T", 1) == 9 and master.query("g", "T", 0) == 4


def test_a_slave_keeps_its_own_commits_until_the_master_pulled_them(tmp_path: Path) -> None:
    master = ConsumerOffsetManager(tmp_path / "m.json")
    slave = ConsumerOffsetManager(tmp_path / "s.json")
    master.commit("g", "T", 0, 5)
    slave.merge_from_json(master.to_json())
    slave.commit("g", "T", 0, 8)  # acting
    slave.persist()
    restarted = ConsumerOffsetManager(tmp_path / "s.json")
    for s in (slave, restarted):
        s.merge_from_json(master.to_json())  # the master has not pulled it back yet
        assert s.query("g", "T", 0) == 8
    master.merge_newer(restarted.to_json())
    master.commit("g", "T", 0, 9)
    restarted.merge_from_json(master.to_json())
    assert restarted.query("g", "T", 0) == 9
    assert b"localCommits" not in restarted.to_json(), "never on the wire"


def test_a_slave_copies_its_masters_offsets_only_after_its_906() -> None:
    core = _classic(1, acting_master=True)
    core.step(e.NamesrvAnswered("m:0", "m:ha"), 10)
    assert core.state.master_addr == "m:0" and not core.copies_metadata
    core.step(e.MasterPushedHa("m:0", "m:ha"), 20)
    assert not core.copies_metadata, "not before the master is listed (its pulls are done)"
    core.step(e.MemberGroup({0: "m:0", 1: "10.0.0.1:10911"}), 30)
    assert core.copies_metadata
    # The master goes away: when it is back it pulls us first.
    core.step(e.MinBrokerChanged(1, "10.0.0.1:10911", offline_addr="m:0"), 40)
    assert not core.copies_metadata
    # Without acting master a slave copies its master's metadata as before.
    plain = _classic(1)
    plain.step(e.NamesrvAnswered("m:0", "m:ha"), 10)
    assert plain.copies_metadata


def test_a_new_ha_connection_hands_the_slave_back_again() -> None:
    core = _classic(0, acting_master=True)
    core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 10)
    core.step(e.HaInfoPushed(1, True), 20)
    core.step(e.ReverseSynced(1, True), 30)
    assert core.state.pulled == {1}
    core.step(e.SlaveConnected(1, False), 40)  # it may have restarted, and acted
    assert core.state.pulled == set()
    out = core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 1_000)
    assert _names(out) == ["PushHaInfo"]


def test_a_pre_online_slave_already_transferring_goes_online() -> None:
    core = _classic(1, acting_master=True, pre_online=True)
    core.step(e.MemberGroup({0: "m:0"}), 10)
    core.step(e.MasterHaAnswered("m:0", "m:ha"), 20)
    core.step(e.SlaveFollowing(), 30)
    assert not core.isolated
    # Restarted into a new round while its HA client still transfers (no new SlaveFollowing).
    again = _classic(1, acting_master=True, pre_online=True)
    again.step(e.MemberGroup(None), 10)  # a failed round, following meanwhile
    again.state.following, again.state.transferring = "m:ha", True
    again.step(e.Tick(), 2_000)
    again.step(e.MemberGroup({0: "m:0"}), 2_010)
    out = again.step(e.MasterHaAnswered("m:0", "m:ha"), 2_020)
    assert "Register" in _names(out) and not again.isolated


def test_a_pre_online_slave_follows_the_master_that_gave_it_906() -> None:
    core = _classic(1, acting_master=True, pre_online=True)
    core.step(e.MasterPushedHa("m:0", "m:ha"), 5)  # the master, in its own pre-online
    out = core.step(e.MemberGroup({1: "10.0.0.1:10911"}), 10)  # the name servers lack it
    assert out == [a.AskMasterHa("m:0")] and not core.acting


def test_a_pre_online_master_gives_906_again_before_each_pull() -> None:
    core = _classic(0, acting_master=True, pre_online=True)
    core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 10)
    core.step(e.HaInfoPushed(1, True), 20)
    assert core.step(e.SlaveConnected(1, False), 30) == [a.PushHaInfo(1, "s:1")]
    assert core.step(e.HaInfoPushed(1, True), 40) == [a.ReverseSync(1, "s:1")]


def test_with_acting_master_a_master_without_slaves_yet_fences() -> None:
    def fenced_after_silence(**kw: object) -> bool:
        core = _classic(0, acting_master=True, fence_when_isolated=True, **kw)
        core.step(e.NamesrvAnswered(), 0)
        core.step(e.Tick(), 6_000)
        return core.data_plane_fenced

    assert fenced_after_silence(total_replicas=2), "a slave may act for it"
    assert not fenced_after_silence(total_replicas=1), "nobody can act for a lone master"


#: The four seeds once pinned here as open findings are analysed: 11070 (a split brain: a
#: master resumed from a 20 s pause ran the special services until its next tick) and 1478,
#: 2649 (a 905 about a restarted master's old registration ended a slave's hand-back hold
#: while the master, in pre-online, pulled its metadata) were bugs of the role core, fixed and
#: in FOUND; 8385 was the simulator's: its pre-online pull did not persist what it merged, as
#: io/acting.py's reverse_sync does, so a master killed right after lost it.


def test_a_pull_that_took_offsets_is_persisted_at_once() -> None:
    """Seed 8385 (a master killed 2 s after its pre-online pull) lost a pulled offset while
    the simulator kept the pull in memory only; the broker persists it at once."""
    result = run_acting_seed(8385)
    assert result.ok, result.error


def test_a_905_saying_the_master_went_offline_ends_the_hand_back_hold() -> None:
    core = _classic(1, acting_master=True)
    core.step(e.MemberGroup({0: "m:0", 1: "10.0.0.1:10911"}), 10)
    core.step(e.MasterPushedHa("m:0", "m:ha"), 20)  # an online master's hand-back
    out = core.step(e.MinBrokerChanged(1, "10.0.0.1:10911", offline_addr="m:0"), 30)
    # The master is asked first: the registration that went offline may be an old one.
    assert [x for x in out if not isinstance(x, a.Log)] == [a.AskMasterHa("m:0")]
    assert not core.acting
    out = core.step(e.MasterHaAnswered("m:0", None), 40)  # it died: act now, no 30 s hold
    assert "StartSpecial" in _names(out) and core.acting


def test_a_905_about_a_restarted_masters_old_registration_keeps_the_hold() -> None:
    """Seeds 1478 and 2649: the master restarted and, in pre-online, gave us its 906; then
    the name servers dropped its registration from before the restart."""
    core = _classic(1, acting_master=True)
    core.step(e.MemberGroup({0: "m:0", 1: "10.0.0.1:10911"}), 10)
    core.step(e.MasterPushedHa("m:0", "m:ha"), 20)
    offline = e.MinBrokerChanged(1, "10.0.0.1:10911", offline_addr="m:0")
    assert "AskMasterHa" in _names(core.step(offline, 30))
    assert _names(core.step(offline, 35)) == [], "asked once"
    core.step(e.MasterHaAnswered("m:0", "m:ha"), 40)  # alive, in pre-online
    assert not core.acting and core.state.hand_back_until_ms is not None
    assert _names(core.step(e.MemberGroup({1: "10.0.0.1:10911"}), 1_000)) == []
    assert not core.acting, "the hold stands while the master is not listed"
    # An answer after a newer view decided changes nothing.
    core.step(e.MemberGroup({0: "m:0", 1: "10.0.0.1:10911"}), 2_000)
    core.step(e.MinBrokerChanged(1, "10.0.0.1:10911", offline_addr="m:0"), 2_010)
    core.step(e.MemberGroup({0: "m:0", 1: "10.0.0.1:10911"}), 2_020)
    assert not core.acting and core.state.hold_probe is None


def test_a_master_resumed_after_a_long_pause_fences_on_its_first_event() -> None:
    """Seed 11070: the first event after a 20 s stop is not always a tick."""
    core = _classic(
        0,
        acting_master=True,
        fence_when_isolated=True,
        isolation_timeout_ms=10_000,
        total_replicas=2,
    )
    core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 0)
    assert core.state.special
    out = core.step(e.SlaveDisconnected(1), 20_000)
    assert "StopSpecial" in _names(out) and core.data_plane_fenced
    # An acting slave's silence likewise.
    slave = _classic(1, acting_master=True, fence_when_isolated=True, isolation_timeout_ms=10_000)
    slave.step(e.MinBrokerChanged(1, "10.0.0.1:10911", offline_addr="m:0"), 10)
    assert slave.acting
    out = slave.step(e.MasterHaAnswered("m:0", None), 20_000)
    assert "StopSpecial" in _names(out) and not slave.acting


def test_a_request_after_a_long_pause_finds_the_master_fenced() -> None:
    """The data plane's side of seed 11070: the broker feeds DataPlaneRequest before it
    judges a request the FMQ fence governs, so the first request after a long stop is refused
    even when it is handled before the tick."""
    core = _classic(
        0,
        acting_master=True,
        fence_when_isolated=True,
        isolation_timeout_ms=10_000,
        total_replicas=2,
    )
    core.step(e.MemberGroup({0: "10.0.0.0:10911", 1: "s:1"}), 0)
    assert not core.data_plane_fenced
    out = core.step(e.DataPlaneRequest(), 20_000)
    assert core.data_plane_fenced and "StopSpecial" in _names(out)


def test_a_master_back_from_isolation_runs_no_special_service_until_its_slaves_are_back() -> None:
    """A probe's SIGSTOP/SIGCONT of a master: unfenced, it restarted the delay scanner on its
    stale progress before it pulled the acting slave's, and delivered again all 12 delayed
    messages the slave had delivered. The services wait for the hand-back now (at most
    RECLAIM_WAIT_MS)."""
    from rmq_ha.broker.core.role import RECLAIM_WAIT_MS

    core = _classic(
        0,
        acting_master=True,
        fence_when_isolated=True,
        isolation_timeout_ms=10_000,
        total_replicas=2,
    )
    members = {0: "10.0.0.0:10911", 1: "s:1"}
    core.step(e.MemberGroup(members), 0)
    core.step(e.ReverseSynced(1, True), 10)  # the hand-back of its start
    assert core.state.special
    assert "StopSpecial" in _names(core.step(e.DataPlaneRequest(), 20_000))
    core.step(e.MemberGroup(members), 20_100)  # contact is back, listed again
    out = core.step(e.Tick(), 20_150)
    assert not core.data_plane_fenced and "StartSpecial" not in _names(out)
    out = core.step(e.MemberGroup(members), 20_200)
    assert "PushHaInfo" in _names(out)  # the slave is handed back first
    assert not core.state.special
    out = core.step(e.ReverseSynced(1, True), 20_300)
    assert "StartSpecial" in _names(out) and core.state.special
    # A slave whose metadata never comes back: the services start after the wait, loudly.
    core.step(e.DataPlaneRequest(), 40_000)
    core.step(e.MemberGroup(members), 40_100)
    core.step(e.Tick(), 40_150)
    core.step(e.MemberGroup(members), 40_200)
    assert not core.state.special
    core.step(e.ReverseSynced(1, False), 40_300)
    assert not core.state.special
    for t in range(41_000, 40_150 + RECLAIM_WAIT_MS, 2_000):  # name servers answer on
        core.step(e.MemberGroup(members), t)
        core.step(e.ReverseSynced(1, False), t + 10)
        assert not core.state.special
    out = core.step(e.Tick(), 40_150 + RECLAIM_WAIT_MS)
    assert "StartSpecial" in _names(out)
    assert any("may be delivered again" in x.text for x in out if isinstance(x, a.Log))


def test_strict_lock_quorum_is_a_majority_of_the_replicas() -> None:
    """The pure decision handlers/locks.py and the simulator share."""
    from rmq_ha.broker.locks import quorum_locked, strict_lock_forwarded, strict_quorum

    assert [strict_quorum(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert strict_lock_forwarded(True, False, 2)
    assert not strict_lock_forwarded(True, True, 3), "a forward is not forwarded again"
    assert not strict_lock_forwarded(False, False, 3) and not strict_lock_forwarded(True, False, 1)
    q0, q1 = ("T", "b", 0), ("T", "b", 1)
    assert quorum_locked([q0, q1], [[q0], []], 3) == [q0]
    assert quorum_locked([q0, q1], [[q0, q1], [q1]], 3) == [q0, q1]
    assert quorum_locked([q0], [], 2) == []
    assert quorum_locked([q0], [[q1]], 2) == [], "a queue this replica did not lock"


def test_delay_progress_merge_keeps_the_larger_level_whatever_the_versions(
    tmp_path: Path,
) -> None:
    from rmq_ha.broker.special.delay import DelayOffsets

    master = DelayOffsets(tmp_path / "m.json", version_step=1)
    slave = DelayOffsets(tmp_path / "s.json", version_step=1)
    slave.adopt(master.to_json())
    for i in range(5):
        master.update(1, i)  # after the slave's last copy: 5 version bumps
    slave.update(2, 9)  # the slave acts: one bump, an older-looking version
    assert slave.data_version.compare(master.data_version) < 0
    assert master.merge_newer(slave.to_json())
    assert master.get(2) == 9 and master.get(1) == 4
    assert not master.merge_newer(slave.to_json()), "nothing further: nothing taken"


def test_a_slave_keeps_its_delay_progress_until_the_master_pulled_it(tmp_path: Path) -> None:
    from rmq_ha.broker.special.delay import DelayOffsets

    master = DelayOffsets(tmp_path / "m.json", version_step=1)
    slave = DelayOffsets(tmp_path / "s.json", version_step=1)
    master.update(1, 5)
    slave.adopt(master.to_json())
    slave.update(1, 8)  # acting
    slave.persist()
    restarted = DelayOffsets(tmp_path / "s.json", version_step=1)
    for s in (slave, restarted):
        s.adopt(master.to_json())  # the master has not pulled it back yet
        assert s.get(1) == 8
    master.merge_newer(restarted.to_json())
    master.update(1, 9)
    restarted.adopt(master.to_json())
    assert restarted.get(1) == 9
    assert b"localUpdates" not in restarted.to_json(), "never on the wire"


#: A one-way partition (fault probe, session 16): a slave stops hearing the controller (its
#: heartbeats still arrive) a while before the master dies (long enough for its heartbeats
#: to show it: half the heartbeat timeout and a heartbeat more). The controller must elect a
#: replica that hears it; one that cannot would never learn it was elected, and as the new
#: master's SyncStateSet is itself alone, the group would stay masterless until the heal.
#: Both slaves in turn, so the deaf one is at some point the one the ranking prefers.
DEAF_SLAVE_HEAL_MS = 12_000


@pytest.mark.parametrize("which", [-1, -2])
def test_a_slave_that_cannot_hear_the_controller_is_not_elected(which: int) -> None:
    cfg = GroupConfig(min_in_sync_replicas=1, loss=0.0, heal_ms=DEAF_SLAVE_HEAL_MS)
    script = [(1200, "deaf", which), (2500, "kill", 0)]
    result = run_group_seed(3, cfg=cfg, script=script)
    assert result.ok, result.error
    assert result.failover_ms is not None
    assert 2500 + result.failover_ms < DEAF_SLAVE_HEAL_MS, result.failover_ms


@pytest.mark.parametrize("which", [-1, -2])
def test_a_slave_the_controller_no_longer_hears_is_not_elected(which: int) -> None:
    """The cut the other way (second fault probe): a slave's heartbeats stop reaching the
    controller, so it stays alive there until its heartbeat expires; the master dies within
    that time. Elected, it would never learn it (the group masterless until the heal); its
    last heartbeat, older than half the timeout, rules it out. Writes are rare here (none
    between the cut and the kill), so both
    slaves report the same offsets and the ranking does not already prefer the other one for
    its fresher heartbeat."""
    cfg = GroupConfig(
        min_in_sync_replicas=1, loss=0.0, heal_ms=DEAF_SLAVE_HEAL_MS, produce_every_ms=3000
    )
    script = [(2000, "mute", which), (2000 + 900, "kill", 0)]
    result = run_group_seed(3, cfg=cfg, script=script, trace=True)
    assert result.ok, result.error
    muted = next(line.split()[-1] for line in result.trace if "FAULT mute" in line)
    first = next(line for line in result.trace if "ctl: elected" in line and "epoch 1" not in line)
    assert f"elected {muted[1:]} " not in first, (muted, first)
    assert "elected None" not in first, first
