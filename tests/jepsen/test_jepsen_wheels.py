"""Issue 14: the bench works from installed wheels, not only from a checkout.

Builds the three wheels (`rmq_jepsen.wheels`, what `make wheels` runs), checks that the rmq-ha
wheel is the broker's alone (no benchmarks, launchers or demos), stripped, and manylinux_2_17
(auditwheel's verdict on the glibc symbols it needs), installs the three into a fresh virtualenv
(`python -m venv` in a temp dir; dependencies only from the wheelhouse `make wheelhouse` fills,
with --no-index: no traffic leaves the machine), and runs a short campaign
with that virtualenv's `rmq-ha` from a temp directory, outside the checkout: local namespace
hosts as root (kill + partition), loopback processes otherwise (kill + pause). The checker from
its wheel then judges the run.
"""

from __future__ import annotations

import io
import json
import os
import platform
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from campaignutil import ROOT, tear_down
from rmq_jepsen.state import StateDir
from rmq_jepsen.wheels import build_all

from rmq_ha import history as h

pytestmark = pytest.mark.timeout(1200)

CHECKOUT = Path(__file__).resolve().parents[2]
#: The wheels' dependencies as wheels (`make wheelhouse`, a prerequisite of `make test`).
WHEELHOUSE = Path(os.environ.get("RMQ_HA_WHEELHOUSE", CHECKOUT / ".venv" / "wheelhouse"))
SUBNET = f"198.18.{200 + os.getpid() % 50}.0/24"
PREFIX = f"rmqjw{os.getpid() % 1000}"


def _clean_env(venv: Path) -> dict[str, str]:
    """Nothing of the checkout's environment: no VIRTUAL_ENV, PYTHONPATH or RMQ_HA_SOURCE."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "RMQ_HA_SOURCE", "RMQ_JEPSEN_STATE")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_all(CHECKOUT, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (WHEELHOUSE / ".stamp").exists():
        pytest.fail(f"no wheelhouse at {WHEELHOUSE}: run `make wheelhouse` (make test does)")
    d = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True, timeout=300)
    offline = ["--no-index", "--find-links", str(WHEELHOUSE)]
    p = subprocess.run(
        [
            str(d / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            *offline,
            *map(str, wheels.values()),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=_clean_env(d),
        cwd=d,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return d


def test_the_rmq_ha_wheel_is_the_broker_alone_stripped_and_manylinux_2_17(
    wheels: dict[str, Path],
) -> None:
    whl = wheels["rmq-ha"]
    arch = platform.machine()
    assert whl.name.endswith(f"manylinux_2_17_{arch}.whl"), whl.name
    names = zipfile.ZipFile(whl).namelist()
    for part in ("broker/broker.py", "nameserver/server.py", "controller/", "client/", "cli.py"):
        assert any(n.startswith(f"rmq_ha/{part}") for n in names), part
    shipped = [n for n in names if n.startswith(("rmq_ha/bench/", "rmq_ha/demo.py"))]
    assert shipped == [], f"benchmarks or demos in the broker's wheel: {shipped}"
    # auditwheel reads the extension's versioned glibc symbols: nothing newer than 2.17.
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(whl)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert show.returncode == 0, show.stderr
    assert f'"manylinux_2_17_{arch}"' in " ".join(show.stdout.split()), show.stdout
    # Stripped: no symbol table, no debug info.
    from elftools.elf.elffile import ELFFile

    (so,) = [n for n in names if n.startswith("rmq_ha/_native") and n.endswith(".so")]
    with zipfile.ZipFile(whl).open(so) as f:
        elf = ELFFile(io.BytesIO(f.read()))
        sections = [s.name for s in elf.iter_sections()]
    assert ".symtab" not in sections and not [s for s in sections if s.startswith(".debug")], (
        sections
    )


@dataclass
class Campaign:
    proc: subprocess.CompletedProcess[str]
    work: Path

    @property
    def run_dir(self) -> Path:
        assert self.proc.returncode == 0, self.proc.stderr[-3000:]
        run = Path(json.loads(self.proc.stdout.strip().splitlines()[-1])["run_dir"])
        return run if run.is_absolute() else self.work / run


@pytest.fixture(scope="module")
def campaign(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    """One short campaign run by the fresh virtualenv's rmq-ha in a temp directory."""
    work = tmp_path_factory.mktemp("work")
    state = StateDir(work / "state")
    if ROOT:
        hosts, nemesis = "local", "kill-one,partition-halves"
    else:
        hosts, nemesis = "loopback", "kill-one,pause-one"
        print("not root: loopback processes, partition skipped (needs network namespaces)")
    argv = [
        str(venv / "bin" / "rmq-ha"),
        "campaign",
        "run",
        "--hosts",
        hosts,
        "--n",
        "3",
        "--subnet",
        SUBNET,
        "--prefix",
        PREFIX,
        "--state-dir",
        str(state.root),
        "--topology",
        "independent",
        "--workload",
        "queue",
        "--nemesis",
        nemesis,
        "--time",
        "14",
        "--first-fault",
        "3",
        "--fault-duration",
        "3",
        "--between",
        "2",
        "--recovery",
        "2",
        "--rate",
        "40",
        "--concurrency",
        "3",
        "--consumers",
        "1",
        "--seed",
        "14",
        "--store",
        "store",  # relative: inside the temp working directory
        "--test",
        "wheels",
        "--no-check",  # the checker runs in its own test below
        "--quiet",
        "--json",
    ]
    try:
        p = subprocess.run(
            argv, capture_output=True, text=True, timeout=600, cwd=work, env=_clean_env(venv)
        )
        yield Campaign(p, work)
    finally:
        tear_down(state, PREFIX)  # even on failure


def test_a_fresh_virtualenv_runs_a_local_campaign_from_outside_the_checkout(
    venv: Path, campaign: Campaign
) -> None:
    # The virtualenv really runs from wheels: its packages are in its site-packages and the
    # bench finds no checkout, not even from the working directory.
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import rmq_ha, rmq_jepsen, rmq_check; from rmq_jepsen import checkout; "
            "print(*(list(m.__path__)[0] for m in (rmq_ha, rmq_jepsen, rmq_check)), "
            "checkout.find(cwd=True))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=campaign.work,
        env=_clean_env(venv),
    )
    assert probe.returncode == 0, probe.stderr
    *files, found = probe.stdout.split()
    assert all(f.startswith(str(venv)) for f in files), files
    assert found == "None"

    run = campaign.run_dir
    assert run.resolve().is_relative_to(campaign.work.resolve())
    out = json.loads(campaign.proc.stdout.strip().splitlines()[-1])
    config = json.loads((run / "config.json").read_text())
    assert config["git"] is None, "from wheels there is no checkout to take a revision from"
    assert config["versions"] == {"rmq-ha": "0.1.0", "rmq-jepsen": "0.1.0", "rmq-check": "0.1.0"}
    # The roles ran the virtualenv's rmq-ha (checked on every node before the start).
    assert f"run test -x {venv / 'bin' / 'rmq-ha'} -> 0" in (run / "control.log").read_text()
    for role in config["roles"]:
        log = run / "nodes" / role["node"] / role["name"] / "role.log"
        assert "ready" in log.read_text(), log
    ops = list(h.read(run / "history.jsonl"))
    assert sum(1 for o in ops if o.f == "send" and o.type == "ok") > 50
    starts = {o.value.fault_id for o in ops if o.f == "fault-start"}
    assert starts and starts == {o.value.fault_id for o in ops if o.f == "fault-stop"}
    assert out["summary"]["healed"]["healed"], out["summary"]["healed"]


def test_the_checker_from_its_wheel_judges_that_campaign(
    venv: Path, wheels: dict[str, Path], campaign: Campaign
) -> None:
    names = zipfile.ZipFile(wheels["rmq-check"]).namelist()
    # issue 18: the wheel once shipped without its subpackages
    assert "rmq_check/analyses/__init__.py" in names
    run = campaign.run_dir
    check = subprocess.run(
        [str(venv / "bin" / "rmq-ha"), "check", str(run)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=campaign.work,
        env=_clean_env(venv),
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is True and results["safety_failed"] == [], results["safety_failed"]
