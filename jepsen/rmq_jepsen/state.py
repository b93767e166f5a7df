"""Bookkeeping that outlives the bench process: what hosts exist, which role processes run,
and which faults are in force — each written *before* the action it describes (eloqsql #81,
openraft #1976: a crash between acting and recording left faults in place for good).

The state directory (`$RMQ_JEPSEN_STATE`, else /var/lib/rmq-jepsen as root, else
~/.local/state/rmq-jepsen) holds:

* `hosts.json`   the local provider's namespaces, bridge, veths and sshd pids;
* `faults.json`  the fault journal: per fault id, its undo actions (drop an iptables chain,
                 SIGCONT a pid, reset a fake clock, delete a qdisc), written before the fault;
* `procs.json`   role processes the bench started (host, role, pidfile, pid).

Files are replaced atomically (temp, fsync, rename), so a crash leaves the old or the new
version, never half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def default_state_dir() -> Path:
    env = os.environ.get("RMQ_JEPSEN_STATE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/rmq-jepsen")
    return Path.home() / ".local" / "state" / "rmq-jepsen"


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


class StateDir:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_state_dir()
        self.root.mkdir(parents=True, exist_ok=True)

    # ---- hosts (local provider) ----------------------------------------------------------

    @property
    def hosts_file(self) -> Path:
        return self.root / "hosts.json"

    def hosts(self) -> dict[str, Any] | None:
        got: dict[str, Any] | None = read_json(self.hosts_file, None)
        return got

    def set_hosts(self, obj: dict[str, Any] | None) -> None:
        if obj is None:
            self.hosts_file.unlink(missing_ok=True)
        else:
            write_json_atomic(self.hosts_file, obj)

    # ---- fault journal ---------------------------------------------------------------------

    @property
    def faults_file(self) -> Path:
        return self.root / "faults.json"

    def faults(self) -> dict[str, dict[str, Any]]:
        got: dict[str, dict[str, Any]] = read_json(self.faults_file, {})
        return got

    def begin_fault(self, key: str, entry: dict[str, Any]) -> None:
        """Records a fault and how to undo it, before it is injected."""
        faults = self.faults()
        faults[key] = entry
        write_json_atomic(self.faults_file, faults)

    def add_undo(self, key: str, undo: dict[str, Any]) -> None:
        faults = self.faults()
        if key in faults:
            faults[key].setdefault("undo", []).append(undo)
            write_json_atomic(self.faults_file, faults)

    def end_fault(self, key: str) -> None:
        """Forgets a fault once every undo action succeeded."""
        faults = self.faults()
        if faults.pop(key, None) is not None:
            write_json_atomic(self.faults_file, faults)

    # ---- processes ---------------------------------------------------------------------------

    @property
    def procs_file(self) -> Path:
        return self.root / "procs.json"

    def procs(self) -> dict[str, dict[str, Any]]:
        got: dict[str, dict[str, Any]] = read_json(self.procs_file, {})
        return got

    def set_proc(self, key: str, entry: dict[str, Any] | None) -> None:
        procs = self.procs()
        if entry is None:
            if procs.pop(key, None) is None:
                return
        else:
            procs[key] = entry
        write_json_atomic(self.procs_file, procs)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One bench at a time per state directory."""
        import fcntl

        with open(self.root / "lock", "w") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(
                    f"another bench holds {self.root}/lock (one run per state directory)"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
