"""How campaign hosts get rmq_ha (issue 14): SSH / Vagrant hosts install the rmq-ha wheel given
with `--wheel`, or one built from the checkout; a bench running from wheels (no checkout) with
no `--wheel` says what to do instead of building from site-packages. Nothing runs on a host:
the remotes record the commands."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from rmq_jepsen.control import Control, Host, Remote
from rmq_jepsen.db import DB, TOPOLOGIES, Install, InstallError, wheel_for_hosts
from rmq_jepsen.state import StateDir

pytestmark = pytest.mark.timeout(60)


class Recording(Remote):
    def __init__(self, host: Host, seen: list[tuple[str, str, bytes | None]]) -> None:
        super().__init__(host)
        self.seen = seen

    def _exec(self, cmd: str, timeout_s: float, stdin: bytes | None) -> tuple[int, bytes, bytes]:
        self.seen.append((self.host.name, cmd, stdin))
        return 0, b"", b""


def _remote_db(tmp_path: Path, install: Install) -> tuple[DB, list[tuple[str, str, bytes | None]]]:
    seen: list[tuple[str, str, bytes | None]] = []
    hosts = [Host(f"n{i}", f"10.9.0.{10 + i}", ssh_host=f"10.9.0.{10 + i}") for i in (1, 2, 3)]
    control = Control(hosts, remotes={h.name: Recording(h, seen) for h in hosts})
    return DB(control, TOPOLOGIES["single"], state=StateDir(tmp_path / "st"), install=install), seen


def test_ssh_hosts_install_the_given_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "rmq_ha-0.1.0-cp311-abi3-manylinux_2_17_x86_64.whl"
    wheel.write_bytes(b"PK wheel bytes")
    db, seen = _remote_db(tmp_path, Install(wheel=str(wheel)))
    trio.run(db.install, None)
    remote_whl = f"/opt/rmq-jepsen/{wheel.name}"
    uploads = {n for n, cmd, data in seen if f"cat > {remote_whl}.tmp" in cmd}
    assert uploads == {"n1", "n2", "n3"}
    assert all(data == wheel.read_bytes() for _, cmd, data in seen if "cat >" in cmd)
    pips = {n for n, cmd, _ in seen if f"venv/bin/pip install -q {remote_whl}" in cmd}
    assert pips == {"n1", "n2", "n3"}
    assert db.install_spec.rmq_ha_bin == "/opt/rmq-jepsen/venv/bin/rmq-ha"


def test_without_a_checkout_and_without_a_wheel_the_bench_says_to_pass_one(tmp_path: Path) -> None:
    db, seen = _remote_db(tmp_path, Install())
    with pytest.raises(InstallError, match=r"--wheel PATH.*make wheels"):
        trio.run(db.install, None)
    assert seen == [], "nothing is sent to the hosts"


def test_a_wheel_that_is_not_rmq_ha_is_refused_by_name(tmp_path: Path) -> None:
    other = tmp_path / "rmq_jepsen-0.1.0-py3-none-any.whl"
    other.write_bytes(b"x")
    for bad in (other, tmp_path / "missing.whl"):
        with pytest.raises(InstallError, match=str(bad.name)):
            wheel_for_hosts(Install(wheel=str(bad)), tmp_path, None)


def test_local_hosts_run_the_bench_s_own_rmq_ha(tmp_path: Path) -> None:
    """Namespace and loopback hosts share this filesystem: no wheel, the environment the bench
    runs in (here the checkout's .venv; from wheels, the virtualenv they are installed in)."""
    import sys

    seen: list[tuple[str, str, bytes | None]] = []
    hosts = [Host(f"n{i}", "127.0.0.1", port_offset=100 * i) for i in (1, 2, 3)]
    control = Control(hosts, remotes={h.name: Recording(h, seen) for h in hosts})
    db = DB(control, TOPOLOGIES["single"], state=StateDir(tmp_path / "st"))
    trio.run(db.install, None)
    assert db.install_spec.rmq_ha_bin == str(Path(sys.executable).with_name("rmq-ha"))
    assert not [cmd for _, cmd, _ in seen if "pip" in cmd or "cat >" in cmd]


def test_collect_copies_this_runs_role_directories_only(tmp_path: Path) -> None:
    """A node's work directory keeps role directories of earlier runs with other topologies;
    a run collects its own roles' directories (a stale broker-a-2 beside this run's broker
    was once read as this run's). Store data can be left out."""
    host = Host("n1", "127.0.0.1", ssh_host=None, workdir=str(tmp_path / "w"))
    db = DB(Control([host]), TOPOLOGIES["single"], state=StateDir(tmp_path / "st"))
    names = sorted(r.name for r in db.roles)
    assert names
    for name in [*names, "broker-z-9"]:
        d = tmp_path / "w" / name
        (d / "store").mkdir(parents=True)
        (d / "role.log").write_text(f"{name} log\n")
        (d / "store" / "commitlog").write_bytes(b"x" * 100)
    got = trio.run(lambda: db.collect(tmp_path / "run", data=False))
    assert got["n1"] > 0
    nodes = tmp_path / "run" / "nodes" / "n1"
    assert sorted(p.name for p in nodes.iterdir()) == names
    for name in names:
        assert (nodes / name / "role.log").read_text() == f"{name} log\n"
        assert not (nodes / name / "store").exists()
