"""`rmq-ha campaign run --secure` (issue 19): every role of the topology with ACL and TLS on,
and the bench's own clients signing and speaking TLS, so that a campaign shows the verdict does
not change with security on.

Per campaign, in the state directory (never in the repo): a throw-away CA and one server
certificate whose subjectAltNames are every node's address (made with `openssl`), and a
`plain_acl.yml` with one admin account. Each role gets, in its own directory:

* `aclEnable=true`, `plainAclFile`, `innerClientAuthenticationCredentials` (the admin account:
  broker -> name server / controller, Raft and HA are cluster traffic);
* `tls.server.mode=enforcing` with the server certificate, and `tlsEnable=true` with the CA as
  `tls.client.trustCertPath` for its own connections (certificates are verified).

The bench's clients (workloads, drain, "who is master" questions) sign with the same account and
verify the servers against the CA.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path

from rmq_ha.client import ClientConfig
from rmq_ha.net.client import RemotingClient
from rmq_ha.security.signing import Credentials, request_signer
from rmq_ha.security.tls import make_client_context

ADMIN_ACCESS_KEY = "rmqJepsenAdmin"
FILES = ("plain_acl.yml", "ca.pem", "server.pem", "server.key")


class SecureSetupError(RuntimeError):
    """The certificates could not be made (no openssl, or it failed)."""


@dataclass
class Security:
    """The files and settings of a secured campaign (`make` builds one)."""

    dir: Path
    admin: Credentials
    files: dict[str, str] = field(default_factory=dict)

    def role_values(self, role_dir: str) -> dict[str, str]:
        """The config lines of a role whose files are in `role_dir` (see `FILES`)."""
        return {
            "aclEnable": "true",
            "plainAclFile": f"{role_dir}/plain_acl.yml",
            "innerClientAuthenticationCredentials": json.dumps(
                {"accessKey": self.admin.access_key, "secretKey": self.admin.secret_key}
            ),
            "tls.server.mode": "enforcing",
            "tls.server.certPath": f"{role_dir}/server.pem",
            "tls.server.keyPath": f"{role_dir}/server.key",
            "tlsEnable": "true",
            "tls.client.trustCertPath": f"{role_dir}/ca.pem",
        }

    def client_config(self, base: ClientConfig) -> ClientConfig:
        return replace(
            base,
            credentials=self.admin,
            tls=make_client_context(trust=str(self.dir / "ca.pem")),
        )

    def remoting_client(self) -> RemotingClient:
        return RemotingClient(
            signer=request_signer(self.admin),
            tls=make_client_context(trust=str(self.dir / "ca.pem")),
        )


def acl_text(admin: Credentials) -> str:
    return (
        "accounts:\n"
        f"  - accessKey: {admin.access_key}\n"
        f"    secretKey: {admin.secret_key}\n"
        "    admin: true\n"
    )


def make(out: Path, addresses: list[str], *, days: int = 7) -> Security:
    """A CA, a server certificate for `addresses` (IPs or names) and the ACL file, in `out`."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise SecureSetupError("--secure needs openssl on the machine that runs the bench")
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(set(addresses) | {"127.0.0.1"})
    san = ",".join(
        (f"IP:{a}" if a.replace(".", "").isdigit() or ":" in a else f"DNS:{a}") for a in names
    )

    def run(*argv: str) -> None:
        p = subprocess.run([openssl, *argv], cwd=out, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise SecureSetupError(f"openssl {argv[0]} failed: {p.stderr.strip()[-500:]}")

    run(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", str(days), "-subj", "/CN=rmq-jepsen campaign CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    run(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=rmq-jepsen node",
    )  # fmt: skip
    (out / "server.ext").write_text(
        f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    run(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", str(days), "-extfile", "server.ext",
    )  # fmt: skip
    admin = Credentials(ADMIN_ACCESS_KEY, secrets.token_urlsafe(24))
    (out / "plain_acl.yml").write_text(acl_text(admin))
    for name in ("ca.key", "server.key", "plain_acl.yml"):
        (out / name).chmod(0o600)
    files = {name: (out / name).read_text() for name in FILES}
    return Security(out, admin, files)
