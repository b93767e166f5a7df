"""Host providers without running anything: the Vagrantfile (vagrant validate when vagrant is
installed, else `ruby -c` when ruby is, plus parse-level checks always), `vagrant ssh-config`
parsing, host files, the local plan's addresses."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from rmq_jepsen import hosts as hostmod

pytestmark = pytest.mark.timeout(120)

VAGRANT = Path(__file__).resolve().parents[2] / "vagrant"


@pytest.mark.skipif(
    shutil.which("vagrant") is None,
    reason="vagrant is not installed here; test_vagrantfile_static checks the "
    "file instead (ruby -c when ruby exists, parse-level checks always)",
)
def test_vagrant_validate():
    p = subprocess.run(
        ["vagrant", "validate"], cwd=VAGRANT, capture_output=True, text=True, timeout=100
    )
    assert p.returncode == 0, p.stdout + p.stderr


def _strip_ruby(text: str) -> str:
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def test_vagrantfile_static():
    text = (VAGRANT / "Vagrantfile").read_text()
    if shutil.which("ruby"):
        p = subprocess.run(
            ["ruby", "-c", str(VAGRANT / "Vagrantfile")], capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 0 and "Syntax OK" in p.stdout, p.stdout + p.stderr
    code = _strip_ruby(text)
    openers = len(re.findall(r"\bdo\b(\s*\|[^|]*\|)?\s*$", code, re.M))
    openers += len(re.findall(r"^\s*(unless|if|def|class|module|begin)\b", code, re.M))
    assert openers == len(re.findall(r"^\s*end\b", code, re.M)), "unbalanced do/if ... end"
    for a, b in ("()", "[]", "{}"):
        assert code.count(a) == code.count(b), f"unbalanced {a}{b}"
    assert 'Vagrant.configure("2")' in text
    assert 'config.vm.box = "debian/bookworm64"' in text, "Debian 12"
    assert '"private_network"' in text
    assert 'config.vm.define "n#{i}"' in text and '"RMQ_JEPSEN_VAGRANT_N", "5"' in text
    assert "insert_key = false" in text and "id_ed25519" in text, "one shared key"
    prov = (VAGRANT / "provision.sh").read_text()
    for pkg in ("python3", "iptables", "faketime", "chrony"):
        assert re.search(rf"\b{pkg}\b", prov), pkg
    assert subprocess.run(["sh", "-n", str(VAGRANT / "provision.sh")]).returncode == 0


SSH_CONFIG = """Host n1
  HostName 127.0.0.1
  User vagrant
  Port 2222
  IdentityFile "/home/u/.vagrant.d/insecure_private_key"

Host n2
  HostName 127.0.0.1
  User vagrant
  Port 2200
"""


def test_parse_ssh_config():
    cfg = hostmod.parse_ssh_config(SSH_CONFIG)
    assert cfg["n1"] == {
        "hostname": "127.0.0.1",
        "user": "vagrant",
        "port": "2222",
        "identityfile": "/home/u/.vagrant.d/insecure_private_key",
    }
    assert cfg["n2"]["port"] == "2200"


def test_host_file_toml(tmp_path):
    f = tmp_path / "hosts.toml"
    f.write_text(
        '[defaults]\nuser = "admin"\nkey_file = "~/.ssh/k"\n'
        '[[hosts]]\nname = "a"\naddress = "198.18.200.1"\n'
        '[[hosts]]\naddress = "198.18.200.2"\nport = 2022\nuser = "root"\n'
    )
    a, b = hostmod.file_hosts(f)
    assert (a.name, a.address, a.ssh_host, a.user, a.ssh_port) == (
        "a",
        "198.18.200.1",
        "198.18.200.1",
        "admin",
        22,
    )
    assert a.key_file and a.key_file.endswith("/.ssh/k") and not a.key_file.startswith("~")
    assert (b.name, b.user, b.ssh_port) == ("n2", "root", 2022)
    assert "password" not in str(a.to_json()) or a.to_json()["password"] is None


def test_local_plan_addresses():
    plan = hostmod.LocalPlan(5)
    assert plan.gateway == "198.18.0.254"
    assert [plan.node(i)["ip"] for i in (1, 5)] == ["198.18.0.11", "198.18.0.15"]
    assert plan.node(2)["netns"] == "rmqj-n2"
    with pytest.raises(hostmod.HostsError):
        hostmod.LocalPlan(300)
    with pytest.raises(hostmod.HostsError):
        hostmod.LocalPlan(20, subnet="198.18.0.0/28").node(20)


def test_loopback_hosts_have_disjoint_ports(tmp_path):
    from rmq_jepsen.db import TOPOLOGIES, Timing, plan_roles
    from rmq_jepsen.state import StateDir

    hosts = hostmod.loopback_hosts(5, StateDir(tmp_path), port_base=30000)
    roles = plan_roles(TOPOLOGIES["controller"], hosts, Timing())
    ports = [r.port for r in roles] + [r.ha_port for r in roles if r.ha_port]
    assert len(ports) == len(set(ports))
    assert all(1024 < p < 65536 for p in ports)
