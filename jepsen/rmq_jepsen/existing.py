"""An existing Apache RocketMQ deployment, described in a host file, as the roles the bench
targets (issue 17: "point the bench at an existing RocketMQ deployment").

The bench installs, configures and starts nothing there: RocketMQ already runs on the hosts.
What it needs is each role's address and ports (to send to it and to ask it who is master;
partitions cut whole nodes by address with iptables, as for rmq_ha hosts), how to find its JVM
(to kill or freeze it) and how to start it again after a kill. A host file says so with a
`[deployment]` table and, per host, a list of `roles`:

    [defaults]
    user = "admin"                       # through `sudo -n` unless root, as for rmq_ha hosts
    key_file = "~/.ssh/id_ed25519"

    [deployment]
    db = "rocketmq"
    topology = "controller"              # name servers with embedded controllers
    cluster = "DefaultCluster"           # the brokers' brokerClusterName (topics go there)

    [[hosts]]
    name = "n1"
    address = "10.1.0.11"
    [[hosts.roles]]
    kind = "namesrv"
    port = 9876
    controller_port = 9878               # controller topology: the embedded controller's port
    match = "NamesrvStartup"             # extended regex over the java process's command line
    start = "cd /opt/rocketmq && nohup sh bin/mqnamesrv -c conf/namesrv.conf >/dev/null 2>&1 &"
    logs = ["/home/rocketmq/logs/rocketmqlogs"]
    [[hosts.roles]]
    kind = "broker"
    group = "broker-a"                   # brokerName
    port = 10911                         # listenPort (HA port: port + 1 unless ha_port says)
    match = "BrokerStartup.*broker-n1\\.conf"
    start = "cd /opt/rocketmq && nohup sh bin/mqbroker -c conf/broker-n1.conf >/dev/null 2>&1 &"

Each role's JVM is the one `java` process whose command line matches `match` (none, or more
than one, is an error naming the role and what was found): `pid_command` lists the pids of
java processes matching it with `ps` and `awk`, not `pgrep -f` — the shell that runs a
`pgrep -f PATTERN` over SSH has the pattern in its own command line and would match itself.
Kill and pause signal that pid (so the fault journal can undo them as for rmq_ha); a killed
role is started again with its `start` command (a role without one cannot be killed: the bench
refuses kill nemeses on it rather than leave the deployment short of a process). Logs are
copied from the paths in `logs`. This module is the pure part: parsing and the command lines;
`rmq_jepsen.db` runs them.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_jepsen.control import Host

#: The topologies an existing RocketMQ deployment may have (those `--db rocketmq` campaigns
#: support: name servers with embedded controllers and one group of brokers per brokerName).
TOPOLOGIES = ("controller",)
KINDS = ("namesrv", "broker")
DEFAULT_MATCH = {
    "namesrv": "org\\.apache\\.rocketmq\\.namesrv\\.NamesrvStartup",
    "broker": "org\\.apache\\.rocketmq\\.broker\\.BrokerStartup",
}


class DeploymentError(ValueError):
    """The host file's deployment is not usable (the message names the host, role and key)."""


@dataclass(frozen=True)
class ExistingRole:
    """One running RocketMQ process of the deployment."""

    name: str
    kind: str  # "namesrv" | "broker"
    node: str
    address: str
    port: int
    match: str
    start: str | None = None
    group: str | None = None
    ha_port: int | None = None
    controller_port: int | None = None
    logs: tuple[str, ...] = ()

    @property
    def addr(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass
class Deployment:
    db: str
    topology: str
    cluster: str = "DefaultCluster"
    roles: list[ExistingRole] = field(default_factory=list)

    def role(self, name: str) -> ExistingRole:
        for r in self.roles:
            if r.name == name:
                return r
        raise KeyError(name)

    def namesrv_addr(self) -> str:
        return ";".join(r.addr for r in self.roles if r.kind == "namesrv")

    def controller_addrs(self) -> list[str]:
        return [
            f"{r.address}:{r.controller_port}"
            for r in self.roles
            if r.kind == "namesrv" and r.controller_port is not None
        ]

    def role_at(self, addr: str) -> ExistingRole | None:
        """The role listening at host:port (a name server also at its controller's port)."""
        for r in self.roles:
            ports = (r.port,) if r.controller_port is None else (r.port, r.controller_port)
            if any(f"{r.address}:{p}" == addr for p in ports):
                return r
        return None


def _int(v: Any, where: str, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 65536:
        raise DeploymentError(f"{where}: {key} must be a port number (1-65535), not {v!r}")
    return v


def parse_deployment(data: Mapping[str, Any], hosts: list[Host], source: str) -> Deployment | None:
    """The deployment a parsed host file describes (None: it has no [deployment] table, so the
    bench deploys its own). `hosts` are the file's hosts (`hosts.file_hosts`), in order."""
    dep = data.get("deployment")
    if dep is None:
        return None
    if not isinstance(dep, Mapping):
        raise DeploymentError(f"{source}: [deployment] must be a table")
    db = dep.get("db", "rocketmq")
    if db != "rocketmq":
        raise DeploymentError(
            f"{source}: deployment.db = {db!r}: only an existing rocketmq deployment is supported "
            "(the bench deploys rmq_ha itself)"
        )
    topo = dep.get("topology", "controller")
    if topo not in TOPOLOGIES:
        raise DeploymentError(
            f"{source}: deployment.topology = {topo!r}: not one of {', '.join(TOPOLOGIES)}"
        )
    raw_hosts = data.get("hosts") or []
    if len(raw_hosts) != len(hosts):
        raise DeploymentError(f"{source}: {len(raw_hosts)} [[hosts]] for {len(hosts)} hosts")
    cluster = dep.get("cluster", "DefaultCluster")
    if not isinstance(cluster, str) or not cluster:
        raise DeploymentError(f"{source}: deployment.cluster must be the brokerClusterName")
    out = Deployment(db=db, topology=topo, cluster=cluster)
    count = {"namesrv": 0, "broker": 0}
    for h, raw in zip(hosts, raw_hosts, strict=True):
        for j, r in enumerate(raw.get("roles") or [], 1):
            where = f"{source}: host {h.name}, role {j}"
            kind = r.get("kind")
            if kind not in KINDS:
                raise DeploymentError(f"{where}: kind = {kind!r}: not one of {', '.join(KINDS)}")
            unknown = sorted(
                set(r)
                - {"kind", "port", "match", "start", "group", "ha_port", "logs"}
                - {"controller_port", "name"}
            )
            if unknown:
                raise DeploymentError(f"{where}: unknown key(s) {', '.join(unknown)}")
            if "port" not in r:
                raise DeploymentError(f"{where}: port is required (the {kind}'s listenPort)")
            port = _int(r["port"], where, "port")
            match = r.get("match", DEFAULT_MATCH[kind])
            try:
                re.compile(match)
            except re.error as e:
                raise DeploymentError(f"{where}: match {match!r} is not a regex: {e}") from e
            group = r.get("group")
            if kind == "broker" and not group:
                raise DeploymentError(f"{where}: group is required for a broker (its brokerName)")
            ctl = r.get("controller_port")
            if kind == "namesrv" and topo == "controller" and ctl is None:
                raise DeploymentError(
                    f"{where}: controller_port is required in the controller topology (the "
                    "embedded controller's port, where the bench asks for the master)"
                )
            count[kind] += 1
            name = str(r.get("name") or f"{'ns' if kind == 'namesrv' else group}-{h.name}")
            logs = r.get("logs") or []
            if not isinstance(logs, list) or not all(isinstance(x, str) for x in logs):
                raise DeploymentError(f"{where}: logs must be a list of paths")
            out.roles.append(
                ExistingRole(
                    name=name,
                    kind=kind,
                    node=h.name,
                    address=h.address,
                    port=port,
                    match=str(match),
                    start=r.get("start"),
                    group=group,
                    ha_port=(
                        _int(r.get("ha_port", port + 1), where, "ha_port")
                        if kind == "broker"
                        else None
                    ),
                    controller_port=None if ctl is None else _int(ctl, where, "controller_port"),
                    logs=tuple(logs),
                )
            )
    names = [r.name for r in out.roles]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DeploymentError(f"{source}: role names repeat: {', '.join(dup)} (set name = ...)")
    if not count["namesrv"] or not count["broker"]:
        raise DeploymentError(
            f"{source}: a deployment needs at least one namesrv and one broker role "
            f"(found {count['namesrv']} and {count['broker']})"
        )
    return out


def load_deployment(path: str | Path, hosts: list[Host]) -> Deployment | None:
    p = Path(path)
    text = p.read_text()
    data: dict[str, Any] = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    return parse_deployment(data, hosts, str(p))


# ---- command lines ----------------------------------------------------------------------------


def pid_command(role: ExistingRole) -> str:
    """Prints the pid of every `java` process whose command line matches the role's regex,
    one a line (ps's comm is the executable's name: the shell and awk running this never
    match, whatever their own arguments)."""
    prog = '$2 == "java" && $0 ~ ENVIRON["RMQJ_MATCH"] { print $1 }'
    # Through the environment: awk -v would take the regex's backslashes as escapes.
    env = f"RMQJ_MATCH={shlex.quote(role.match)}"
    return f"ps -ww -eo pid=,comm=,args= | {env} awk {shlex.quote(prog)}"


def parse_pids(role: ExistingRole, out: str) -> int:
    """The one pid `pid_command` found (DeploymentError: none, or several)."""
    pids = [int(x) for x in out.split() if x.isdigit()]
    if len(pids) != 1:
        what = "no java process" if not pids else f"{len(pids)} java processes ({pids})"
        raise DeploymentError(
            f"{role.name} on {role.node}: {what} match {role.match!r}; the role's match must "
            "pick out exactly its JVM"
        )
    return pids[0]


def signal_command(pid: int, sig: str) -> str:
    """kill -SIG of the role's JVM (the pid `pid_command` found just before)."""
    if not re.fullmatch(r"[A-Z]+", sig):
        raise ValueError(f"signal name {sig!r}: expected e.g. KILL, STOP, CONT")
    return f"kill -{sig} {int(pid)}"


def start_command(role: ExistingRole) -> str:
    """The deployment's own command that starts the role again (after a kill)."""
    if not role.start:
        raise DeploymentError(
            f"{role.name} on {role.node}: no start command in the host file, so the bench "
            'cannot bring it back after a kill (add start = "..." to the role)'
        )
    return role.start


def listening_command(role: ExistingRole) -> str:
    """Exits 0 once something on the node listens on the role's port (ss, from iproute2)."""
    return f"ss -Hltn 'sport = :{int(role.port)}' | grep -q ."
