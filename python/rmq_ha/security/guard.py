"""The access check every request passes (a `net.dispatch.Guard`), with its plain_acl.yml
reloaded when the file changes: RocketMQ's AclFileWatchService looks every 5 s; here the first
request after each aclWatchIntervalMs looks (one stat), so no task is needed. A file that no
longer parses is logged and the last good one stays in force."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Protocol

from rmq_ha.net.connection import Signer
from rmq_ha.protocol.codes import ResponseCode
from rmq_ha.protocol.command import RemotingCommand
from rmq_ha.security.acl import AclConfig, AclConfigError, decide, load_acl_file
from rmq_ha.security.addresses import host_of
from rmq_ha.security.signing import ACCESS_KEY, parse_credentials_json, request_signer

log = logging.getLogger(__name__)

#: RocketMQ answers an AclException thrown by its RPC hook with SYSTEM_ERROR and the
#: exception's text (RemotingHelper.exceptionSimpleDesc), which the Java client shows.
ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class AclGuard:
    def __init__(self, path: str | Path, role: str, watch_interval_s: float = 5.0) -> None:
        self.path = Path(path)
        self.role = role
        self.watch_interval_s = watch_interval_s
        self._stamp = _stamp(self.path)
        self.acl: AclConfig = load_acl_file(self.path)  # a bad file at start is fatal
        #: Counters (tests and logs): refused requests, of which cluster traffic; reloads.
        self.refused = 0
        self.refused_cluster = 0
        self.reloads = 0
        self._next_look = time.monotonic() + watch_interval_s

    def current(self) -> AclConfig:
        """The config in force, after looking at the file if the interval has passed."""
        now = time.monotonic()
        if now >= self._next_look:
            self._next_look = now + self.watch_interval_s
            self.reload_if_changed()
        return self.acl

    def check(self, peer: str, cmd: RemotingCommand) -> RemotingCommand | None:
        self.current()
        ip = host_of(peer)
        v = decide(self.acl, cmd.code, cmd.ext_fields, cmd.body, cmd.version, ip)
        if v.allowed:
            return None
        self.refused += 1
        ak = cmd.ext_fields.get(ACCESS_KEY)
        if v.cluster:
            self.refused_cluster += 1
            # Cluster traffic refused: somebody who is not the cluster tried to act as part of
            # it (or a member has the wrong credentials): always worth a warning.
            log.warning(
                "%s refused cluster request code %d from %s (accessKey %r): %s",
                self.role,
                cmd.code,
                peer,
                ak,
                v.reason,
            )
        else:
            log.info(
                "%s refused request code %d from %s (accessKey %r): %s",
                self.role,
                cmd.code,
                peer,
                ak,
                v.reason,
            )
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}: {v.reason}")

    def reload_if_changed(self) -> bool:
        """Reloads the file if its mtime, size or inode changed; True if a new config is in
        force. A file that does not load keeps the old config (logged)."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        if stamp is None:
            log.error("%s: ACL file %s is gone; keeping the last config", self.role, self.path)
            return False
        try:
            acl = load_acl_file(self.path)
        except AclConfigError as e:
            log.error("%s: ACL file not reloaded, keeping the last config: %s", self.role, e)
            return False
        self.acl = acl
        self.reloads += 1
        log.info("%s: ACL file %s reloaded (%d accounts)", self.role, self.path, len(acl.accounts))
        return True


class _SecurityConfig(Protocol):
    """The security keys every role's config has (config.NamesrvConfig, ControllerConfig,
    BrokerConfig)."""

    @property
    def acl_enable(self) -> bool: ...
    @property
    def plain_acl_file(self) -> str: ...
    @property
    def acl_watch_interval_ms(self) -> int: ...
    @property
    def inner_client_authentication_credentials(self) -> str: ...


def guard_of(cfg: _SecurityConfig, role: str) -> AclGuard | None:
    """The role's guard when aclEnable=true, else None. Raises AclConfigError for a bad file."""
    if not cfg.acl_enable:
        return None
    return AclGuard(cfg.plain_acl_file, role, cfg.acl_watch_interval_ms / 1000)


def inner_signer(cfg: _SecurityConfig) -> Signer | None:
    """Signs the role's own outgoing requests with innerClientAuthenticationCredentials."""
    creds = parse_credentials_json(
        cfg.inner_client_authentication_credentials, "innerClientAuthenticationCredentials"
    )
    return None if creds is None else request_signer(creds)
