"""Where the nodes come from. Every provider returns `Host`s reached over SSH, except the
loopback fallback (no root: processes on 127.0.0.1, no network faults).

* `local`    N network namespaces on a bridge, one sshd per namespace, addresses in
             198.18.0.0/24 (RFC 2544 benchmarking range; configurable). Needs root, and says
             so. Installs openssh-server, iptables and faketime with apt-get when missing.
* `vagrant`  reads `vagrant ssh-config` in vagrant/ (n1..n5; see vagrant/Vagrantfile).
* `FILE`     a TOML or JSON host file (see docs/bench.md).
* `loopback` n1..nN as port ranges on 127.0.0.1, commands run locally.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_jepsen.control import Host, LocalRemote
from rmq_jepsen.state import StateDir

DEFAULT_SUBNET = "198.18.0.0/24"
DEFAULT_PREFIX = "rmqj"
PACKAGES = {
    "/usr/sbin/sshd": "openssh-server",
    "/usr/sbin/iptables": "iptables",
    "/usr/bin/faketime": "faketime",
}
FAKETIME_LIBS = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
)


class HostsError(RuntimeError):
    pass


def is_root() -> bool:
    return os.geteuid() == 0


def _sh(argv: list[str], *, check: bool = True, timeout: float = 60.0) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise HostsError(f"`{' '.join(argv)}` exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def ensure_packages(log: Any = print) -> list[str]:
    """apt-get installs what the local hosts need (root only); returns what it installed."""
    missing = [pkg for path, pkg in PACKAGES.items() if not Path(path).exists()]
    if not missing:
        return []
    if not is_root():
        raise HostsError(f"missing {', '.join(missing)} and not root: cannot install them")
    if not shutil.which("apt-get"):
        raise HostsError(f"missing {', '.join(missing)} and no apt-get to install them")
    log(f"installing {' '.join(missing)} (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        if p.returncode != 0:
            raise HostsError(f"`{' '.join(argv)}` failed: {p.stderr.strip()[-400:]}")
    return missing


def faketime_lib() -> str | None:
    return next((p for p in FAKETIME_LIBS if Path(p).exists()), None)


# ---- local: network namespaces + sshd ---------------------------------------------------------


@dataclass(frozen=True)
class LocalPlan:
    n: int
    subnet: str = DEFAULT_SUBNET
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not 1 <= self.n <= 200:
            raise HostsError("--n must be between 1 and 200")
        if len(self.bridge) > 15:
            raise HostsError(f"prefix {self.prefix!r} too long for an interface name")

    @property
    def net(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet, strict=False)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br0"

    @property
    def gateway(self) -> str:
        return str(self.net.network_address + (self.net.num_addresses - 2))

    def node(self, i: int) -> dict[str, str]:
        """Node i (1-based): n1 gets .11, n2 .12, ..."""
        ip = self.net.network_address + 10 + i
        if ip not in self.net or str(ip) == self.gateway:
            raise HostsError(f"subnet {self.subnet} too small for {self.n} nodes")
        return {
            "name": f"n{i}",
            "netns": f"{self.prefix}-n{i}",
            "veth": f"{self.prefix}-v{i}",
            "ip": str(ip),
        }


def _ssh_dir(state: StateDir) -> Path:
    return state.root / "ssh"


def _keygen(path: Path) -> None:
    if not path.exists():
        _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)])


def local_up(
    n: int,
    state: StateDir,
    *,
    subnet: str = DEFAULT_SUBNET,
    prefix: str = DEFAULT_PREFIX,
    log: Any = print,
) -> list[Host]:
    """Creates the bridge, N namespaces and an sshd in each; idempotent for the same plan."""
    if not is_root():
        raise HostsError(
            "local hosts need root (network namespaces, a bridge, sshd on port 22); run as root, "
            "or use --hosts loopback (processes on 127.0.0.1, kill and pause only)"
        )
    plan = LocalPlan(n, subnet, prefix)
    old = state.hosts()
    if old is not None:
        if old.get("n") == n and old.get("subnet") == subnet and old.get("prefix") == prefix:
            hosts = [Host.from_json(h) for h in old["hosts"]]
            if all(_sshd_alive(state, h) for h in hosts):
                return hosts
        local_down(state, log=log)
    ensure_packages(log)
    taken = sorted({nd["netns"] for nd in map(plan.node, range(1, n + 1))} & _netns_list())
    if Path(f"/sys/class/net/{plan.bridge}").exists():
        taken.append(plan.bridge)
    if taken:
        # Not ours to record (or delete): another state directory, or another bench.
        raise HostsError(
            f"{', '.join(taken)} already exist (hosts of another state directory?); "
            f"`rmq-ha hosts down` with that state directory, or use another --prefix"
        )
    sshd = _ssh_dir(state)
    sshd.mkdir(parents=True, exist_ok=True)
    os.chmod(sshd, 0o700)
    _keygen(sshd / "id_ed25519")
    _keygen(sshd / "host_ed25519")
    (sshd / "authorized_keys").write_text((sshd / "id_ed25519.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    nodes = [plan.node(i) for i in range(1, n + 1)]
    hosts = [
        Host(
            name=nd["name"],
            address=nd["ip"],
            ssh_host=nd["ip"],
            key_file=str(sshd / "id_ed25519"),
            netns=nd["netns"],
            workdir=str(state.root / "nodes" / nd["name"]),
            iface="eth0",
        )
        for nd in nodes
    ]
    # Bookkeeping first: a crash from here on is undone by `hosts down`.
    state.set_hosts(
        {
            "provider": "local",
            "n": n,
            "subnet": subnet,
            "prefix": prefix,
            "bridge": plan.bridge,
            "gateway": plan.gateway,
            "nodes": nodes,
            "hosts": [h.to_json() for h in hosts],
        }
    )
    bits = plan.net.prefixlen
    _sh(["ip", "link", "add", plan.bridge, "type", "bridge"])
    _sh(["ip", "addr", "add", f"{plan.gateway}/{bits}", "dev", plan.bridge])
    _sh(["ip", "link", "set", plan.bridge, "up"])
    for nd in nodes:
        ns, veth = nd["netns"], nd["veth"]
        _sh(["ip", "netns", "add", ns])
        _sh(["ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p"])
        _sh(["ip", "link", "set", veth + "p", "netns", ns])
        _sh(["ip", "link", "set", veth, "master", plan.bridge, "up"])
        _sh(["ip", "-n", ns, "link", "set", veth + "p", "name", "eth0"])
        _sh(["ip", "-n", ns, "addr", "add", f"{nd['ip']}/{bits}", "dev", "eth0"])
        _sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        conf = sshd / f"sshd_{nd['name']}.conf"
        conf.write_text(
            f"Port 22\nListenAddress {nd['ip']}\nHostKey {sshd / 'host_ed25519'}\n"
            f"AuthorizedKeysFile {sshd / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"StrictModes no\nPidFile {sshd / ('sshd_' + nd['name'] + '.pid')}\n"
            "MaxSessions 64\nMaxStartups 64\nUseDNS no\n"
        )
        _sh(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "/usr/sbin/sshd",
                "-f",
                str(conf),
                "-E",
                str(sshd / f"sshd_{nd['name']}.log"),
            ]
        )
    deadline = time.monotonic() + 15
    for h in hosts:
        while not _port_open(h.address, 22):
            if time.monotonic() > deadline:
                raise HostsError(f"sshd on {h.name} ({h.address}) did not come up")
            time.sleep(0.05)
    for h in hosts:
        Path(h.workdir).mkdir(parents=True, exist_ok=True)
    return hosts


def _port_open(addr: str, port: int) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=0.5):
            return True
    except OSError:
        return False


def _sshd_alive(state: StateDir, h: Host) -> bool:
    pidf = _ssh_dir(state) / f"sshd_{h.name}.pid"
    try:
        os.kill(int(pidf.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return _port_open(h.address, 22)


def local_down(state: StateDir, *, log: Any = print) -> list[str]:
    """Heals every journalled fault, stops every process in the namespaces, deletes the
    namespaces and the bridge. Works after a crash (reads only the state directory) and is
    idempotent. Returns what it did."""
    from rmq_jepsen.nemesis import heal_journal

    did: list[str] = []
    did += heal_journal(state, log=log)
    info = state.hosts()
    if info is None:
        return did
    for nd in info.get("nodes", []):
        ns = nd["netns"]
        if ns not in _netns_list():
            continue
        # Everything in the namespace was started by the bench (sshd, roles, their children).
        for pid in _sh(["ip", "netns", "pids", ns], check=False).split():
            try:
                os.kill(int(pid), 9)
                did.append(f"killed pid {pid} in {ns}")
            except (OSError, ValueError):
                pass
        _sh(["ip", "netns", "del", ns], check=False)
        did.append(f"deleted netns {ns}")
    for nd in info.get("nodes", []):
        if Path(f"/sys/class/net/{nd['veth']}").exists():
            _sh(["ip", "link", "del", nd["veth"]], check=False)
    bridge = info.get("bridge")
    if bridge and Path(f"/sys/class/net/{bridge}").exists():
        _sh(["ip", "link", "del", bridge], check=False)
        did.append(f"deleted bridge {bridge}")
    for key in list(state.procs()):
        state.set_proc(key, None)
    state.set_hosts(None)
    return did


def _netns_list() -> set[str]:
    out = _sh(["ip", "netns", "list"], check=False)
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def local_hosts(state: StateDir) -> list[Host] | None:
    info = state.hosts()
    if info is None or info.get("provider") != "local":
        return None
    return [Host.from_json(h) for h in info["hosts"]]


def local_status(state: StateDir) -> dict[str, Any]:
    info = state.hosts()
    if info is None:
        return {"up": False}
    hosts = [Host.from_json(h) for h in info["hosts"]]
    return {
        "up": True,
        "provider": info.get("provider"),
        "subnet": info.get("subnet"),
        "bridge": info.get("bridge"),
        "hosts": [
            {"name": h.name, "address": h.address, "netns": h.netns, "sshd": _sshd_alive(state, h)}
            for h in hosts
        ],
        "faults_in_journal": len(state.faults()),
        "processes": len(state.procs()),
    }


# ---- loopback (no root) -----------------------------------------------------------------------


def loopback_hosts(n: int, state: StateDir, *, port_base: int = 0) -> list[Host]:
    """n1..nN on 127.0.0.1, each with its own port range (`port_base` + 100 per node)."""
    if port_base <= 0:
        port_base = 20000 + (os.getpid() % 200) * 100
    return [
        Host(
            name=f"n{i}",
            address="127.0.0.1",
            ssh_host=None,
            workdir=str(state.root / "loopback" / f"n{i}"),
            port_offset=port_base - 9000 + (i - 1) * 100,
        )
        for i in range(1, n + 1)
    ]


# ---- vagrant ----------------------------------------------------------------------------------

#: Where the Vagrantfile is when the bench does not run from a checkout.
VAGRANT_DIR_ENV = "RMQ_JEPSEN_VAGRANT_DIR"


def vagrant_dir() -> Path:
    """$RMQ_JEPSEN_VAGRANT_DIR, else the checkout's vagrant/, else ./vagrant."""
    from rmq_jepsen import checkout

    if os.environ.get(VAGRANT_DIR_ENV):
        return Path(os.environ[VAGRANT_DIR_ENV])
    root = checkout.find(require="vagrant/Vagrantfile")
    return root / "vagrant" if root is not None else Path.cwd() / "vagrant"


def vagrant_subnet() -> str:
    return os.environ.get("RMQ_JEPSEN_VAGRANT_SUBNET", "192.168.56")


def parse_ssh_config(text: str) -> dict[str, dict[str, str]]:
    """`vagrant ssh-config` output -> {host: {hostname, port, user, identityfile}}."""
    out: dict[str, dict[str, str]] = {}
    cur: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, val = line.partition(" ")
        key = key.lower()
        val = val.strip().strip('"')
        if key == "host":
            cur = out.setdefault(val, {})
        elif cur is not None:
            cur.setdefault(key, val)
    return out


def vagrant_hosts(vdir: Path | None = None) -> list[Host]:
    """The nodes from `vagrant ssh-config` in `vdir` (default `vagrant_dir()`); each node's
    service address is its private network address (RMQ_JEPSEN_VAGRANT_SUBNET.1x, as the
    Vagrantfile assigns them)."""
    vd = vdir or vagrant_dir()
    if not shutil.which("vagrant"):
        raise HostsError("vagrant is not installed (https://developer.hashicorp.com/vagrant)")
    if not (vd / "Vagrantfile").is_file():
        raise HostsError(
            f"no Vagrantfile in {vd}: run from the checkout, or set "
            f"{VAGRANT_DIR_ENV} to the directory holding the checkout's vagrant/ files"
        )
    p = subprocess.run(
        ["vagrant", "ssh-config"], cwd=vd, capture_output=True, text=True, timeout=120
    )
    if p.returncode != 0:
        raise HostsError(
            f"vagrant ssh-config failed (are the VMs up? `cd vagrant && vagrant "
            f"up`): {p.stderr.strip()[-300:]}"
        )
    cfg = parse_ssh_config(p.stdout)
    # One shared key on every node (the provisioner installs it), as Jepsen wants.
    shared_key = vd / ".ssh" / "id_ed25519"
    hosts: list[Host] = []
    for name in sorted(cfg, key=lambda s: (len(s), s)):
        c = cfg[name]
        idx = int(name.lstrip("n")) if name.lstrip("n").isdigit() else len(hosts) + 1
        hosts.append(
            Host(
                name=name,
                address=f"{vagrant_subnet()}.{10 + idx}",
                ssh_host=c.get("hostname", "127.0.0.1"),
                ssh_port=int(c.get("port", "22")),
                user=c.get("user", "vagrant"),
                key_file=str(shared_key) if shared_key.exists() else c.get("identityfile"),
                workdir="/var/lib/rmq-jepsen",
            )
        )
    return hosts


# ---- a host file ------------------------------------------------------------------------------


def file_hosts(path: str | Path) -> list[Host]:
    """TOML or JSON: optional [defaults] (user, port, key_file, password, workdir) and a list
    `hosts` of {name, address[, ssh_host, port, user, key_file, password, workdir, iface]}."""
    p = Path(path)
    text = p.read_text()
    data: dict[str, Any] = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    d = data.get("defaults", {})
    out = []
    for i, h in enumerate(data.get("hosts", []), 1):
        if "address" not in h:
            raise HostsError(f"{p}: host {i} has no address")
        key = h.get("key_file", d.get("key_file"))
        out.append(
            Host(
                name=str(h.get("name", f"n{i}")),
                address=str(h["address"]),
                ssh_host=str(h.get("ssh_host", h["address"])),
                ssh_port=int(h.get("port", d.get("port", 22))),
                user=str(h.get("user", d.get("user", "root"))),
                key_file=os.path.expanduser(key) if key else None,
                password=h.get("password", d.get("password")),
                workdir=str(h.get("workdir", d.get("workdir", "/var/lib/rmq-jepsen"))),
                iface=str(h.get("iface", d.get("iface", ""))),
            )
        )
    if not out:
        raise HostsError(f"{p}: no hosts")
    return out


def emergency_remote(h: Host) -> LocalRemote | None:
    """A way to a local namespace host that needs no sshd (for healing after a crash)."""
    if h.netns and is_root():
        return LocalRemote(h)
    return None


def python_for_nodes() -> str:
    return sys.executable
