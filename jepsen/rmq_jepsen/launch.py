"""The one launcher of local processes: rmq_ha roles (`rmq-ha namesrv|broker|controller -c CONF
--ready-file F`), real RocketMQ JVMs and client programs, for the benchmarks, the tests, the
interop harness and the real-RocketMQ launcher alike.

A `Proc` is one process with its config already written, its log file, and a readiness check
(`ReadyFile`: the role wrote host:port to its ready file; `LogMatch`: a line in its log). It
runs in a session of its own, so it leads its own process group: signals, stop and kill go to
the whole group (a JVM's or a shell's children die with it), and only while the leader has not
been reaped, so a recycled pid is never signalled. Stopped by pid, never by name.

`free_ports` picks loopback ports that are free right now (peers must know each other's ports
before they start), optionally in blocks (the real broker listens on P, P-2 and P+1).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

LOOPBACK = "127.0.0.1"

#: How a test, a benchmark or the harness runs `rmq-ha`: this interpreter's rmq_ha.
RMQ_HA: list[str] = [sys.executable, "-m", "rmq_ha.cli"]


#: How long `Proc.wait_stopped` waits for a SIGSTOPped group to stop.
STOP_TIMEOUT_S = 30.0


def _group_stopped(pgid: int) -> bool:
    """Whether every thread of every process in group `pgid` is stopped (or exiting)."""
    found = False
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # fields after the name: state, ppid, pgrp, ...
                continue
            found = True
            for t in (d / "task").iterdir():
                state = (t / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("T", "t", "Z", "X"):
                    return False
        except (OSError, IndexError, ValueError):
            continue  # the process or thread ended meanwhile
    return found


class LaunchError(RuntimeError):
    """A process did not come up."""


class ProcessExited(LaunchError):
    """The process exited before it was ready."""


class NotReady(LaunchError, TimeoutError):
    """The process did not become ready in time."""


# ---- ports ------------------------------------------------------------------------------------


def free_ports(n: int = 1, *, span: Iterable[int] = (0,), host: str = LOOPBACK) -> list[int]:
    """`n` distinct ports P, free on `host` right now, such that P+d is free as well for every
    d in `span`, also on all interfaces (the real broker's HA port binds 0.0.0.0). No two blocks
    overlap. Racy by nature: another process may take a port before it is used."""
    offsets = sorted(set(span) | {0})
    extra = [d for d in offsets if d != 0]
    held: list[socket.socket] = []
    taken: set[int] = set()
    try:
        for _ in range(200 * max(1, n)):
            if len(held) == n:
                break
            s = socket.socket()
            s.bind((host, 0))
            base = s.getsockname()[1]
            block = {base + d for d in offsets}
            if (
                min(block) < 1024
                or max(block) > 65535
                or block & taken
                or not all(_bindable(base + d, host) for d in extra)
            ):
                s.close()
                continue
            held.append(s)  # held until all are chosen: the kernel hands out distinct ports
            taken |= block
        ports = [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()
    if len(ports) < n:
        raise LaunchError(f"found only {len(ports)} of {n} free port blocks {offsets}")
    return ports


def free_port(span: Iterable[int] = (0,)) -> int:
    """One free port (block); see `free_ports`."""
    return free_ports(1, span=span)[0]


def _bindable(port: int, host: str) -> bool:
    for h in dict.fromkeys((host, "0.0.0.0")):
        with socket.socket() as s:
            try:
                s.bind((h, port))
            except OSError:
                return False
    return True


# ---- config files -----------------------------------------------------------------------------


def write_properties(path: Path, values: Mapping[str, Any]) -> Path:
    """A Java-properties config (RocketMQ key names), one `key = value` per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
    return path


# ---- readiness --------------------------------------------------------------------------------


class Ready(Protocol):
    """How a process says it is ready: the value (an address, a log match) once it is."""

    def reset(self, proc: Proc) -> None: ...

    def __call__(self, proc: Proc) -> str | None: ...


@dataclass
class ReadyFile:
    """`--ready-file PATH`: the role writes host:port there (atomically) once it listens."""

    path: Path

    def reset(self, proc: Proc) -> None:
        self.path.unlink(missing_ok=True)

    def __call__(self, proc: Proc) -> str | None:
        try:
            text = self.path.read_text().strip()
        except OSError:
            return None
        return text or None


@dataclass
class LogMatch:
    """A line of the process's log that says it is up; the value is the pattern's first group
    (or the whole match). Only what was logged since the last start counts."""

    pattern: re.Pattern[str]
    _offset: int = field(default=0, init=False)

    def reset(self, proc: Proc) -> None:
        try:
            self._offset = proc.log.stat().st_size if proc.append_log else 0
        except OSError:
            self._offset = 0

    def __call__(self, proc: Proc) -> str | None:
        try:
            with open(proc.log, "rb") as f:
                f.seek(self._offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        m = self.pattern.search(text)
        if m is None:
            return None
        return m.group(1) if m.groups() else m.group(0)


# ---- a process --------------------------------------------------------------------------------

Stdout = Literal["null", "log", "pipe"] | Path


@dataclass(eq=False)
class Proc:
    """One local process: started, checked for readiness, signalled and stopped by its pid
    (with its process group). It can be started again after it stopped (a restart)."""

    name: str
    argv: list[str]
    log: Path
    ready: Ready | None = None
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    #: stderr always goes to `log`; stdout is discarded ("null"), goes to the log as well
    #: ("log"), to a pipe ("pipe": `popen.stdout`), or to a file.
    stdout: Stdout = "null"
    #: Append to the log across restarts (False: truncate it at every start).
    append_log: bool = True
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    # ---- start --------------------------------------------------------------------------------

    def start(self) -> Proc:
        if self.popen is not None and not self._exited():
            raise LaunchError(f"{self.name} is already running (pid {self.popen.pid})")
        self._reap()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if self.ready is not None:
            self.ready.reset(self)
        out_file: IO[bytes] | None = None
        with open(self.log, "ab" if self.append_log else "wb") as log:
            stdout: int | IO[bytes]
            if self.stdout == "null":
                stdout = subprocess.DEVNULL
            elif self.stdout == "log":
                stdout = log
            elif self.stdout == "pipe":
                stdout = subprocess.PIPE
            else:
                out_file = open(Path(self.stdout), "wb")
                stdout = out_file
            try:
                self.popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=log,
                    cwd=self.cwd,
                    env={**os.environ, **(self.env or {})},
                    start_new_session=True,  # its own process group, led by this pid
                )
            finally:
                if out_file is not None:
                    out_file.close()
        return self

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise LaunchError(f"{self.name} was never started")
        return self.popen.pid

    # ---- state --------------------------------------------------------------------------------

    def _exited(self) -> bool:
        """Whether the leader exited, without reaping it (its pid stays ours until then)."""
        p = self.popen
        if p is None or p.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return p.poll() is not None
        return info is not None

    @property
    def alive(self) -> bool:
        """Started and not exited (a SIGSTOPped process is alive)."""
        return self.popen is not None and not self._exited()

    @property
    def returncode(self) -> int | None:
        """None while running; else the exit code (negative: the signal), once reaped."""
        if self.popen is None or not self._exited():
            return None
        self._reap()
        return None if self.popen is None else self.popen.returncode

    def _reap(self) -> None:
        """After the leader exited: kill what is left of its group, then reap the leader."""
        p = self.popen
        if p is None or p.returncode is not None:
            return
        self._killpg(signal.SIGKILL)  # the zombie leader still holds the group's id
        p.wait(timeout=10)

    def _killpg(self, sig: int) -> None:
        p = self.popen
        if p is None or p.returncode is not None:
            return  # reaped: the pid may belong to someone else now
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            # Not a group leader after all (never with start_new_session): the pid alone.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, sig)
        except PermissionError:
            pass

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def describe(self) -> str:
        pid = self.popen.pid if self.popen is not None else None
        return f"{self.name} (pid {pid})"

    # ---- readiness ----------------------------------------------------------------------------

    def check_ready(self) -> str | None:
        """The ready value once ready; None while starting; raises if it exited first."""
        if self.popen is None:
            raise LaunchError(f"{self.name} was never started")
        got = self.ready(self) if self.ready is not None else ""
        if got is not None:
            return got
        if self._exited():
            raise ProcessExited(
                f"{self.describe()} exited with {self.returncode} before it was ready "
                f"({' '.join(self.argv[:8])}); log {self.log}:\n{self.tail()}"
            )
        return None

    async def wait_ready(self, timeout_s: float = 30.0) -> str:
        import trio

        with trio.move_on_after(timeout_s):
            while (got := self.check_ready()) is None:
                await trio.sleep(0.02)
            return got
        raise NotReady(f"{self.describe()} not ready within {timeout_s} s:\n{self.tail()}")

    def wait_ready_sync(self, timeout_s: float = 30.0) -> str:
        deadline = time.monotonic() + timeout_s
        while (got := self.check_ready()) is None:
            if time.monotonic() > deadline:
                raise NotReady(f"{self.describe()} not ready within {timeout_s} s:\n{self.tail()}")
            time.sleep(0.02)
        return got

    # ---- signals and stopping -----------------------------------------------------------------

    def signal(self, sig: int) -> None:
        """`sig` to the process group, while the process runs. SIGSTOP returns once every
        thread of the group has stopped (see `wait_stopped`)."""
        if self.alive:
            self._killpg(sig)
            if sig == signal.SIGSTOP:
                self.wait_stopped()

    def wait_stopped(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Waits until every thread of the process group is stopped (Linux; elsewhere a
        no-op). kill() returns before that: a group stop wakes one thread, and the others
        stop only once it has run, so on a busy machine a native thread (the broker's
        replication loops) went on receiving and acknowledging for a while after SIGSTOP
        returned, and a test that paused a replica saw a write acknowledged through it."""
        p = self.popen
        if p is None or not Path("/proc/self/task").is_dir():
            return
        deadline = time.monotonic() + timeout_s
        while not _group_stopped(p.pid):
            if self._exited():
                return
            if time.monotonic() > deadline:
                raise LaunchError(f"{self.describe()}: not stopped {timeout_s} s after SIGSTOP")
            time.sleep(0.001)  # polling /proc: there is no event for another process's stop

    def wait(self, timeout_s: float | None = None) -> int:
        """Waits for the process to exit (raises subprocess.TimeoutExpired); its exit code."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._exited():
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.argv, timeout_s or 0.0)
            time.sleep(0.01)
        rc = self.returncode
        assert rc is not None
        return rc

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM (and SIGCONT, should it be paused), SIGKILL after `grace_s`; then whatever
        is left of its group is killed. Returns the exit code (None if never started)."""
        if self.popen is None:
            return None
        if not self._exited():
            self._killpg(signal.SIGTERM)
            self._killpg(signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait_exit(grace_s)
        if not self._exited():
            self._killpg(signal.SIGKILL)
        return self._finish()

    def kill(self) -> int | None:
        """SIGKILL to the group, then reaped. Returns the exit code (None if never started)."""
        if self.popen is None:
            return None
        self._killpg(signal.SIGKILL)
        return self._finish()

    def wait_exit(self, timeout_s: float) -> None:
        """Waits for the leader to exit without reaping it."""
        deadline = time.monotonic() + timeout_s
        while not self._exited():
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.argv, timeout_s)
            time.sleep(0.01)

    def _finish(self) -> int | None:
        p = self.popen
        assert p is not None
        if p.returncode is None:
            self._killpg(signal.SIGKILL)
            p.wait(timeout=10)
        if p.stdout is not None:
            p.stdout.close()
        return p.returncode


# ---- rmq_ha roles -----------------------------------------------------------------------------


def role_proc(
    tmp: Path,
    role: str,
    name: str,
    values: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    args: Iterable[str] = (),
) -> Proc:
    """`rmq-ha <role> -c <tmp>/<name>.conf --ready-file <tmp>/<name>.ready [args]`, its log
    <tmp>/<name>.log (stderr, appended across restarts); ready once it listens."""
    conf = write_properties(tmp / f"{name}.conf", values)
    ready = tmp / f"{name}.ready"
    return Proc(
        name,
        [*RMQ_HA, role, "-c", str(conf), "--ready-file", str(ready), *args],
        tmp / f"{name}.log",
        ReadyFile(ready),
        env=env,
    )


def java_argv(
    main: str,
    *,
    classpath: str,
    conf: Path | str,
    jvm: Iterable[str] = (),
    home: Path | str | None = None,
) -> list[str]:
    """`java [jvm] [-Drocketmq.home.dir=home -Duser.home=home] -cp classpath main -c conf`: how
    a real RocketMQ role runs (here through `java_proc`, on bench nodes through rmq_jepsen.db)."""
    props = [] if home is None else [f"-Drocketmq.home.dir={home}", f"-Duser.home={home}"]
    return [
        "java",
        *jvm,
        *props,
        "-Djava.net.preferIPv4Stack=true",
        "-cp",
        classpath,
        main,
        "-c",
        str(conf),
    ]


def java_proc(
    name: str,
    main: str,
    *,
    classpath: str,
    conf: Path,
    log: Path,
    ready: re.Pattern[str] | None,
    jvm: Iterable[str] = (),
    home: Path | None = None,
    cwd: Path | None = None,
) -> Proc:
    """A JVM running `main -c conf` (real RocketMQ's NamesrvStartup / BrokerStartup), its
    stdout and stderr in `log` (truncated at every start), ready once `ready` matches a line
    of it. `home` sandboxes rocketmq.home.dir and user.home (RocketMQ logs and stores there)."""
    argv = java_argv(main, classpath=classpath, conf=conf, jvm=jvm, home=home)
    return Proc(
        name,
        argv,
        log,
        LogMatch(ready) if ready is not None else None,
        cwd=cwd,
        stdout="log",
        append_log=False,
    )


# ---- groups of processes ----------------------------------------------------------------------


def stop_all(procs: Iterable[Proc], grace_s: float = 10.0) -> None:
    """Stops each (by pid), in the given order; never raises for one that is already gone."""
    for p in procs:
        p.stop(grace_s)


def kill_all(procs: Iterable[Proc]) -> None:
    for p in procs:
        p.kill()


def logs(procs: Iterable[Proc], chars: int = 3000) -> str:
    """The tails of the processes' logs, for failure messages."""
    out = []
    for p in procs:
        if p.log.exists():
            out.append(f"--- {p.log.name} ({p.describe()})\n{p.log.read_text()[-chars:]}")
    return "\n".join(out)


# ---- waiting ----------------------------------------------------------------------------------


async def wait_for(pred: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """The first truthy value of `pred()`, polled (Trio); AssertionError on timeout."""
    import trio

    with trio.move_on_after(timeout_s):
        while True:
            got = pred()
            if got:
                return got
            await trio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def wait_until(
    what: str, pred: Callable[[], Any], timeout_s: float, procs: Iterable[Proc] = ()
) -> Any:
    """The first truthy value of `pred()`, polled (blocking); raises ProcessExited as soon as
    one of `procs` exits, NotReady on timeout (with the logs' tails)."""
    deadline = time.monotonic() + timeout_s
    watched = list(procs)
    while True:
        got = pred()
        if got:
            return got
        for p in watched:
            if not p.alive:
                raise ProcessExited(
                    f"{p.describe()} exited with {p.returncode} while waiting for {what}; "
                    f"log tail:\n{p.tail()}"
                )
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.describe()}:\n{p.tail()}" for p in watched)
            raise NotReady(f"timed out after {timeout_s} s waiting for {what}\n{tails}")
        time.sleep(0.1)
