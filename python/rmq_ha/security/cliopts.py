"""Command-line options of the admin tools for a secured cluster: credentials (the access key
and, better from the environment than on a command line other users can read, the secret) and
TLS. RocketMQ's mqadmin reads the same pair from conf/tools.yml."""

from __future__ import annotations

import argparse
import os
import ssl

from rmq_ha.net.connection import Signer
from rmq_ha.security.signing import Credentials, request_signer
from rmq_ha.security.tls import make_client_context

ENV_ACCESS_KEY = "RMQ_HA_ACCESS_KEY"
ENV_SECRET_KEY = "RMQ_HA_SECRET_KEY"


def add_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("security (docs/security.md)")
    g.add_argument(
        "--access-key", default=None, help=f"ACL access key (default: ${ENV_ACCESS_KEY})"
    )
    g.add_argument(
        "--secret-key",
        default=None,
        help=f"ACL secret key (default: ${ENV_SECRET_KEY}; the environment keeps it out of ps)",
    )
    g.add_argument("--tls", action="store_true", help="connect with TLS (server not verified)")
    g.add_argument("--tls-trust", default=None, help="connect with TLS, verified against this CA")


def credentials_of(args: argparse.Namespace) -> Credentials | None:
    """Raises ValueError naming the option when only half of the credentials is given."""
    ak = args.access_key or os.environ.get(ENV_ACCESS_KEY) or None
    sk = args.secret_key or os.environ.get(ENV_SECRET_KEY) or None
    if ak is None and sk is None:
        return None
    if ak is None or sk is None:
        missing = "--access-key" if ak is None else "--secret-key"
        raise ValueError(f"{missing} (or ${ENV_ACCESS_KEY}/${ENV_SECRET_KEY}) is missing")
    return Credentials(ak, sk)


def signer_of(args: argparse.Namespace) -> Signer | None:
    """Raises ValueError naming the option when only half of the credentials is given."""
    creds = credentials_of(args)
    return None if creds is None else request_signer(creds)


def tls_of(args: argparse.Namespace) -> ssl.SSLContext | None:
    if args.tls_trust:
        return make_client_context(trust=args.tls_trust)
    return make_client_context() if args.tls else None
