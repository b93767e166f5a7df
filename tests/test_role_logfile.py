"""`--log-file`: a role logs to a file of its own, rotated by size, instead of stderr; a file it
cannot open is refused at start naming the option (an operator running a role for a year must
not need an outside rotator, nor find a full disk from one unbounded log)."""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from rmq_jepsen.launch import RMQ_HA, Proc, ReadyFile, kill_all

from rmq_ha import roles
from rmq_ha.errors import ConfigError


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in root.handlers:
        if h not in handlers:
            h.close()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("restore_logging")
def test_the_log_file_rotates_at_its_size_and_keeps_its_backups(tmp_path: Path) -> None:
    log = tmp_path / "sub" / "broker.log"  # the directory is created
    roles._setup_logging("info", "text", str(log), max_mb=1, backups=2)
    line = "x" * 200
    for i in range(20_000):  # ~4.4 MiB of lines: three rotations
        logging.getLogger("rmq_ha.test").info("%06d %s", i, line)
    for h in logging.getLogger().handlers:
        h.flush()
    files = sorted(p.name for p in log.parent.iterdir())
    assert files == ["broker.log", "broker.log.1", "broker.log.2"]
    for p in log.parent.iterdir():
        assert p.stat().st_size <= 1024 * 1024
    # The newest lines are in the file itself, the older ones in .1 then .2 (.3 was dropped).
    last = log.read_text().splitlines()[-1]
    assert " 019999 " in last
    first_of_1 = int((log.parent / "broker.log.1").read_text().split(": ", 1)[1][:6])
    first_of_2 = int((log.parent / "broker.log.2").read_text().split(": ", 1)[1][:6])
    assert first_of_2 < first_of_1
    assert first_of_2 > 0, "the oldest lines were dropped with the third backup"


@pytest.mark.usefixtures("restore_logging")
def test_a_log_file_that_cannot_be_opened_names_the_option(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"--log-file .*file/x\.log: cannot open it"):
        roles._setup_logging("info", "text", str(blocker / "x.log"))


def _namesrv(tmp_path: Path, *args: str) -> Proc:
    """A name server process on a free port, its stderr in ns.stderr."""
    return Proc(
        "namesrv",
        [*RMQ_HA, "namesrv", "--listen-port", "0", "--ready-file", str(tmp_path / "ns"), *args],
        tmp_path / "ns.stderr",
        ReadyFile(tmp_path / "ns"),
    )


@pytest.mark.timeout(60)
def test_a_role_started_with_a_log_file_logs_there_and_not_on_stderr(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "namesrv.log"
    ns = _namesrv(tmp_path, "--log-file", str(log), "--log-format", "json")
    ns.start()
    try:
        ns.wait_ready_sync(20)
        ns.signal(signal.SIGTERM)
        assert ns.wait(10) == 0, ns.tail()
    finally:
        kill_all([ns])
    text = log.read_text()
    assert '"level": "INFO"' in text and "remoting server" in text and "shutting down" in text
    assert '"level"' not in (tmp_path / "ns.stderr").read_text()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--log-file", "{blocker}/x.log"], "rmq-ha namesrv: --log-file"),
        (["--log-max-mb", "0"], "argument --log-max-mb: 0 is below 1"),
        (["--log-backups", "many"], "argument --log-backups: 'many' is not a whole number"),
    ],
)
def test_bad_log_options_are_refused_at_start(
    tmp_path: Path, args: list[str], message: str
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = [a.replace("{blocker}", str(blocker)) for a in args]
    r = subprocess.run(
        [*RMQ_HA, "namesrv", "--listen-port", "0", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.timeout(60)
def test_a_fatal_signal_is_named_on_stderr_with_the_stacks(tmp_path: Path) -> None:
    """A role killed by SIGBUS (a store file cut under its mapping: the storage probe saw the
    broker die with nothing logged) says so on stderr, with its threads' Python stacks, even
    when it logs to a file."""
    ns = _namesrv(tmp_path, "--log-file", str(tmp_path / "ns.log"))
    ns.start()
    try:
        ns.wait_ready_sync(20)
        ns.signal(signal.SIGBUS)
        assert ns.wait(10) == -signal.SIGBUS
    finally:
        kill_all([ns])
    err = (tmp_path / "ns.stderr").read_text()
    assert "Fatal Python error: Bus error" in err and "Current thread" in err, err
