"""Control of the hosts: run commands, write and upload files, start background processes with
pidfiles, fetch files — over SSH (paramiko), with retries and backoff on transport failures,
and every action logged with its host.

`SSHRemote` is what every real host uses (local namespaces run one sshd each, Vagrant VMs and
host files are SSH by definition). `LocalRemote` runs through a subprocess, optionally inside
a network namespace (`ip netns exec`): the loopback fallback without root uses it, and so does
the emergency heal of a crashed run on local hosts, which must work even if an sshd died.

All calls block; the Trio side calls them through `Control`, which uses worker threads.
"""

from __future__ import annotations

import io
import logging
import os
import shlex
import subprocess
import tarfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

log = logging.getLogger("rmq_jepsen.control")

T = TypeVar("T")

#: How long `Remote.signal(pid, "STOP")` waits for every thread of the process to stop.
STOP_WAIT_S = 10.0


@dataclass(frozen=True)
class Host:
    """One node. `address` is where its services listen and where peers and the client reach
    it; `ssh_host`/`ssh_port` is how the control node logs in (None: a local host run through
    a subprocess, in `netns` if set)."""

    name: str
    address: str
    ssh_host: str | None = None
    ssh_port: int = 22
    user: str = "root"
    key_file: str | None = None
    password: str | None = None
    netns: str | None = None
    #: Root of everything the bench puts on the node (configs, data, logs, pidfiles).
    workdir: str = "/var/lib/rmq-jepsen/node"
    #: Added to every role port (loopback hosts share one address).
    port_offset: int = 0
    #: The node's interface on the bench network ("" = find it by address).
    iface: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if d.get("password"):
            d["password"] = "***"  # never write a password into a run directory
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Host:
        known = set(Host.__dataclass_fields__)
        return Host(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class Result:
    host: str
    cmd: str
    rc: int
    out: str
    err: str
    elapsed_s: float

    def check(self) -> Result:
        if self.rc != 0:
            raise CommandError(self)
        return self


class CommandError(RuntimeError):
    def __init__(self, result: Result) -> None:
        tail = (result.err or result.out).strip()[-400:]
        super().__init__(f"{result.host}: `{result.cmd[:200]}` exited {result.rc}: {tail}")
        self.result = result


class TransportError(RuntimeError):
    """The host could not be reached (after retries): nothing is known about the command."""


@dataclass
class Retry:
    attempts: int = 5
    first_backoff_s: float = 0.2
    max_backoff_s: float = 3.0

    def backoffs(self) -> Iterable[float]:
        b = self.first_backoff_s
        for _ in range(self.attempts - 1):
            yield b
            b = min(self.max_backoff_s, b * 2)


class Remote(ABC):
    def __init__(self, host: Host, action_log: ActionLog | None = None) -> None:
        self.host = host
        self.alog = action_log

    def _log(self, what: str, rc: int | None, elapsed_s: float, note: str = "") -> None:
        line = f"{what} -> {rc} ({elapsed_s * 1000:.0f} ms){' ' + note if note else ''}"
        log.debug("%s: %s", self.host.name, line)
        if self.alog is not None:
            self.alog.write(self.host.name, line)

    def wrap(self, cmd: str) -> str:
        """Non-root users run through sudo (the nodes must allow it without a password)."""
        if self.host.user == "root" or os.environ.get("RMQ_JEPSEN_NO_SUDO"):
            return cmd
        return f"sudo -n sh -c {shlex.quote(cmd)}"

    def run(
        self,
        cmd: str,
        *,
        check: bool = True,
        timeout_s: float = 60.0,
        stdin: bytes | None = None,
        log_output: bool = False,
    ) -> Result:
        t0 = time.monotonic()
        rc, out, err = self._exec(self.wrap(cmd), timeout_s, stdin)
        r = Result(
            self.host.name,
            cmd,
            rc,
            out.decode(errors="replace"),
            err.decode(errors="replace"),
            time.monotonic() - t0,
        )
        note = ""
        if log_output or rc != 0:
            note = (r.err or r.out).strip().replace("\n", " | ")[-300:]
        self._log(f"run {cmd[:300]}", rc, r.elapsed_s, note)
        return r.check() if check else r

    def run_bytes(self, cmd: str, *, timeout_s: float = 300.0) -> bytes:
        t0 = time.monotonic()
        rc, out, err = self._exec(self.wrap(cmd), timeout_s, None)
        self._log(f"run(bytes) {cmd[:200]}", rc, time.monotonic() - t0, f"{len(out)} bytes")
        if rc != 0:
            raise CommandError(
                Result(
                    self.host.name, cmd, rc, "", err.decode(errors="replace"), time.monotonic() - t0
                )
            )
        return out

    def put_text(self, path: str, text: str, mode: int = 0o644) -> None:
        """Writes a file on the host (through stdin, so it works through sudo too)."""
        d = os.path.dirname(path)
        q = shlex.quote(path)
        cmd = f"mkdir -p {shlex.quote(d)} && cat > {q}.tmp && chmod {mode:o} {q}.tmp"
        self.run(f"{cmd} && mv {q}.tmp {q}", stdin=text.encode())

    def upload(self, local: str | Path, remote: str, mode: int = 0o644) -> None:
        data = Path(local).read_bytes()
        d = os.path.dirname(remote)
        q = shlex.quote(remote)
        t0 = time.monotonic()
        rc, _, err = self._exec(
            self.wrap(
                f"mkdir -p {shlex.quote(d)} && cat > {q}.tmp && chmod {mode:o} {q}.tmp "
                f"&& mv {q}.tmp {q}"
            ),
            300.0,
            data,
        )
        self._log(f"upload {local} -> {remote} ({len(data)} bytes)", rc, time.monotonic() - t0)
        if rc != 0:
            raise CommandError(
                Result(
                    self.host.name, f"upload {remote}", rc, "", err.decode(errors="replace"), 0.0
                )
            )

    def fetch_tree(self, remote_dir: str, local_dir: Path, *, exclude: Iterable[str] = ()) -> int:
        """Copies a directory from the host (tar over the channel; sparse files stay sparse).
        Returns the number of bytes transferred; a missing directory copies nothing."""
        ex = " ".join(f"--exclude={shlex.quote(e)}" for e in exclude)
        q = shlex.quote(remote_dir)
        data = self.run_bytes(f"if [ -d {q} ]; then tar -C {q} {ex} -cSzf - .; fi")
        local_dir.mkdir(parents=True, exist_ok=True)
        if data:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
                tf.extractall(local_dir, filter="data")
        return len(data)

    def fetch(self, remote: str, local: Path) -> bool:
        q = shlex.quote(remote)
        data = self.run_bytes(f"if [ -f {q} ]; then cat {q}; else exit 3; fi")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
        return True

    # ---- background processes -----------------------------------------------------------

    def start_daemon(
        self,
        cmd: str,
        *,
        cwd: str,
        log_file: str,
        pidfile: str,
        env: Mapping[str, str] | None = None,
    ) -> int:
        """Starts `cmd` detached (new session, stdin closed, output appended to `log_file`);
        the pidfile holds the pid of `cmd` itself (the shell execs it). Returns the pid."""
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        inner = f"echo $$ > {shlex.quote(pidfile)}; exec {'env ' + envs + ' ' if envs else ''}{cmd}"
        q = shlex.quote
        self.run(
            f"mkdir -p {q(cwd)} {q(os.path.dirname(log_file))} {q(os.path.dirname(pidfile))}"
            f" && rm -f {q(pidfile)} && cd {q(cwd)} && "
            f"(nohup setsid sh -c {q(inner)} >> {q(log_file)} 2>&1 < /dev/null &) && "
            f"for i in $(seq 100); do [ -s {q(pidfile)} ] && break; sleep 0.02; done; "
            f"cat {q(pidfile)}"
        )
        r = self.run(f"cat {q(pidfile)}")
        return int(r.out.strip())

    def signal(self, pid: int, sig: str) -> bool:
        """kill -SIG pid; False if there is no such process. STOP returns once every thread
        of the process is stopped (up to STOP_WAIT_S; `ps -L`): kill returns before a group
        stop is complete, and a broker's native threads would go on replicating meanwhile,
        so the pause's window would start before the process stopped (rmq_jepsen.launch)."""
        cmd = f"kill -{sig} {int(pid)}"
        if sig == "STOP":
            tries = int(STOP_WAIT_S / 0.01)
            cmd += (
                f" && for i in $(seq {tries}); do"
                f" ps -L -o stat= -p {int(pid)} 2>/dev/null | grep -qv '^[TtZX]' || exit 0;"
                " sleep 0.01; done; exit 0"
            )
        r = self.run(cmd, check=False)
        return r.rc == 0

    def proc_state(self, pid: int) -> str | None:
        """The process state letter (R, S, T = stopped, Z, ...), or None if it is gone."""
        r = self.run(f"ps -o stat= -p {int(pid)}", check=False)
        s = r.out.strip()
        return s[0] if r.rc == 0 and s else None

    @abstractmethod
    def _exec(self, cmd: str, timeout_s: float, stdin: bytes | None) -> tuple[int, bytes, bytes]:
        """Runs `cmd` through a shell; raises TransportError if the host cannot be reached."""

    def close(self) -> None:
        return None


class LocalRemote(Remote):
    """Commands through a local subprocess (inside `host.netns` when set)."""

    def _exec(self, cmd: str, timeout_s: float, stdin: bytes | None) -> tuple[int, bytes, bytes]:
        argv = ["sh", "-c", cmd]
        if self.host.netns:
            argv = ["ip", "netns", "exec", self.host.netns, *argv]
        try:
            p = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                timeout=timeout_s,
                stdin=None if stdin is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            return 124, e.stdout or b"", (e.stderr or b"") + b"\ntimed out"
        return p.returncode, p.stdout, p.stderr


class SSHRemote(Remote):
    """One paramiko session per host, opened lazily, reopened after a transport failure."""

    def __init__(
        self, host: Host, action_log: ActionLog | None = None, retry: Retry | None = None
    ) -> None:
        super().__init__(host, action_log)
        self.retry = retry or Retry()
        self._client: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        import paramiko

        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is not None and transport.is_active():
                    return self._client
                self._client.close()
                self._client = None
            client = paramiko.SSHClient()
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            t0 = time.monotonic()
            client.connect(
                self.host.ssh_host or self.host.address,
                port=self.host.ssh_port,
                username=self.host.user,
                key_filename=self.host.key_file,
                password=self.host.password,
                timeout=5,
                banner_timeout=10,
                auth_timeout=10,
                allow_agent=False,
                look_for_keys=False,
            )
            transport = client.get_transport()
            if transport is not None:
                transport.set_keepalive(5)
            self._log(
                f"connect {self.host.ssh_host}:{self.host.ssh_port}", 0, time.monotonic() - t0
            )
            self._client = client
            return client

    def _exec_once(
        self, cmd: str, timeout_s: float, stdin: bytes | None
    ) -> tuple[int, bytes, bytes]:
        client = self._connect()
        transport = client.get_transport()
        chan = transport.open_session(timeout=10)
        chan.settimeout(timeout_s)
        chan.exec_command(cmd)
        if stdin is not None:
            chan.sendall(stdin)
        chan.shutdown_write()
        out = bytearray()
        err = bytearray()
        deadline = time.monotonic() + timeout_s
        while True:
            got = False
            if chan.recv_ready():
                out += chan.recv(1 << 16)
                got = True
            if chan.recv_stderr_ready():
                err += chan.recv_stderr(1 << 16)
                got = True
            # The exit status is not flow-controlled and may arrive while output is still held
            # back by the channel window (a tar of more than 128 KiB came back cut short): done
            # only once the server's EOF is in as well.
            if (
                chan.exit_status_ready()
                and chan.eof_received
                and not chan.recv_ready()
                and not chan.recv_stderr_ready()
            ):
                break
            if time.monotonic() > deadline:
                chan.close()
                return 124, bytes(out), bytes(err) + b"\ntimed out"
            if not got:
                time.sleep(0.002)
        rc = chan.recv_exit_status()
        chan.close()
        return rc, bytes(out), bytes(err)

    def _exec(self, cmd: str, timeout_s: float, stdin: bytes | None) -> tuple[int, bytes, bytes]:
        import paramiko

        last: Exception | None = None
        for backoff in [*self.retry.backoffs(), None]:
            try:
                return self._exec_once(cmd, timeout_s, stdin)
            except (TimeoutError, paramiko.SSHException, OSError, EOFError) as e:
                last = e
                self._log(f"transport error ({e!r})", None, 0.0, "retrying" if backoff else "")
                with self._lock:
                    if self._client is not None:
                        self._client.close()
                        self._client = None
                if backoff is None:
                    break
                time.sleep(backoff)
        raise TransportError(f"{self.host.name}: unreachable over SSH: {last!r}")

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class ActionLog:
    """Every control action, one line each: time, host, what, exit code, duration."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._f = open(path, "a", encoding="utf-8") if path else None

    def write(self, host: str, line: str) -> None:
        if self._f is None:
            return
        with self._lock:
            self._f.write(f"{time.strftime('%H:%M:%S')} {host:>6} {line}\n")
            self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


@dataclass
class Control:
    """The remotes of a set of hosts, with async wrappers (worker threads)."""

    hosts: list[Host]
    action_log: ActionLog = field(default_factory=lambda: ActionLog(None))
    remotes: dict[str, Remote] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for h in self.hosts:
            if h.name not in self.remotes:
                self.remotes[h.name] = remote_for(h, self.action_log)

    @property
    def nodes(self) -> list[str]:
        return [h.name for h in self.hosts]

    def host(self, node: str) -> Host:
        return self.remotes[node].host

    def on(self, node: str) -> Remote:
        return self.remotes[node]

    async def run(self, node: str, cmd: str, **kw: Any) -> Result:
        remote = self.remotes[node]
        return await trio.to_thread.run_sync(lambda: remote.run(cmd, **kw))

    async def call(self, node: str, fn: Callable[[Remote], T]) -> T:
        remote = self.remotes[node]
        return await trio.to_thread.run_sync(lambda: fn(remote))

    async def on_all(self, nodes: Iterable[str], fn: Callable[[str], Awaitable[T]]) -> dict[str, T]:
        """Runs `fn(node)` on every node at once; the first error cancels the others."""
        out: dict[str, T] = {}

        async def one(n: str) -> None:
            out[n] = await fn(n)

        async with trio.open_nursery() as nursery:
            for n in nodes:
                nursery.start_soon(one, n)
        return out

    def close(self) -> None:
        for r in self.remotes.values():
            r.close()
        self.action_log.close()


def remote_for(host: Host, action_log: ActionLog | None = None) -> Remote:
    if host.ssh_host is None:
        return LocalRemote(host, action_log)
    return SSHRemote(host, action_log)
