"""Pure generators of the bench: fault schedules, partitions (grudges), values, keys, rates."""

import itertools
import random

import pytest
from rmq_jepsen import generator as gen

pytestmark = pytest.mark.timeout(30)


def test_parse_nemesis_expands_families_and_keeps_variants():
    got = gen.parse_nemesis("partition,kill-master")
    assert got[: len(gen.FAULTS["partition"])] == list(gen.FAULTS["partition"])
    assert got[-1] == "kill-master"
    assert gen.parse_nemesis("none") == []
    assert gen.parse_nemesis("kill,kill-one") == list(gen.FAULTS["kill"])
    with pytest.raises(ValueError, match="unknown nemesis 'explode'"):
        gen.parse_nemesis("explode")


def _opts(**kw):
    base = dict(
        time_limit_s=120,
        fault_s=10,
        recovery_s=8,
        first_fault_s=5,
        seed=3,
        variants=tuple(gen.parse_nemesis("partition,kill,pause")),
    )
    base.update(kw)
    return gen.ScheduleOptions(**base)


def test_schedule_alternates_faults_and_recovery_periods():
    """YugabyteDB #8636: back-to-back faults left no time to recover."""
    ev = gen.schedule(_opts())
    assert ev, "a 120 s run has fault windows"
    assert all(e.stop_s <= 120 for e in ev)
    assert [e.fault_id for e in ev] == list(range(1, len(ev) + 1))
    windows = sorted({(e.start_s, e.stop_s) for e in ev})
    for (_, e1), (s2, _) in itertools.pairwise(windows):
        assert s2 - e1 >= 8, "a full recovery period separates windows"
    assert ev[0].start_s == 5


def test_schedule_rotates_families_so_a_short_run_sees_each():
    """OpenChaos #22: one fault type per run. Here families take turns."""
    ev = gen.schedule(_opts(time_limit_s=60, fault_s=5, recovery_s=3))
    fams = [e.family for e in ev]
    assert set(fams[:3]) == {"partition", "kill", "pause"}


def test_schedule_overlap_combines_distinct_families_only():
    ev = gen.schedule(_opts(overlap=2, stagger_s=1))
    by_window = {}
    for e in ev:
        by_window.setdefault(e.stop_s, []).append(e)
    for es in by_window.values():
        assert len(es) == 2
        assert len({e.family for e in es}) == 2
        assert es[1].start_s - es[0].start_s == 1
    for t in range(0, 120):
        assert len(gen.in_force(ev, t + 0.5)) <= 2


def test_schedule_is_a_function_of_the_seed():
    assert gen.schedule(_opts(seed=7)) == gen.schedule(_opts(seed=7))
    assert gen.schedule(_opts(variants=())) == []
    assert gen.schedule(_opts(time_limit_s=10)) == []


def test_schedule_rejects_bad_options():
    with pytest.raises(ValueError):
        gen.schedule(_opts(fault_s=0))


def test_target_sizes():
    assert [gen.minority(n) for n in (1, 3, 4, 5)] == [1, 1, 1, 2]
    assert [gen.majority(n) for n in (3, 4, 5)] == [2, 3, 3]


NODES = ["n1", "n2", "n3", "n4", "n5"]


def _symmetric(g):
    return all(b in g.get(a, set()) for a, bs in g.items() for b in bs if a in g.get(b, set()))


def test_halves_and_complete_grudge():
    a, b = gen.halves(NODES, random.Random(1))
    assert len(a) == 2 and len(b) == 3 and set(a) | set(b) == set(NODES)
    g = gen.complete_grudge([a, b])
    for x in a:
        assert g[x] == set(b)
    for x in b:
        assert g[x] == set(a)


def test_ring_grudge_is_a_majorities_ring_for_five():
    g = gen.ring_grudge(NODES)
    for i, n in enumerate(NODES):
        sees = set(NODES) - g[n]
        assert sees == {n, NODES[i - 1], NODES[(i + 1) % 5]}
        assert len(sees) == 3  # a majority of 5
    assert _symmetric(g)
    with pytest.raises(ValueError):
        gen.ring_grudge(NODES[:3])


def test_bridge_grudge():
    g = gen.bridge_grudge(NODES)
    assert g["n3"] == set()
    assert g["n1"] == {"n4", "n5"} and g["n5"] == {"n1", "n2"}


def test_oneway_and_isolate():
    assert gen.oneway_grudge(["n1"], ["n2", "n3"]) == {"n1": {"n2", "n3"}}
    g = gen.isolate_grudge(NODES, ["n2"])
    assert g["n2"] == {"n1", "n3", "n4", "n5"} and g["n1"] == {"n2"}


def test_values_unique_and_keys_have_one_owner():
    v = gen.Values()
    assert [next(v) for _ in range(3)] == [0, 1, 2]
    owners = gen.key_owners(3, 2)
    keys = [k for ks in owners.values() for k in ks]
    assert len(keys) == len(set(keys)) == 6


def test_process_ids_are_fresh():
    p = gen.ProcessIds(10)
    assert [p.fresh(), p.fresh()] == [10, 11]


def test_token_bucket_holds_the_rate():
    b = gen.TokenBucket(100)
    now, waits = 0.0, []
    for _ in range(1000):
        w = b.delay(now)
        waits.append(w)
        now += w
    assert 9.9 <= now <= 10.1  # 1000 ops at 100/s
    with pytest.raises(ValueError):
        gen.TokenBucket(0)
