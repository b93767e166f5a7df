"""ACL 1.0: accounts from RocketMQ's `plain_acl.yml`, and the decision for one request. Pure.

File format (RocketMQ 4.x/5.x `conf/plain_acl.yml`)::

    globalWhiteRemoteAddresses: ["10.10.103.*"]
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: ""
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
        groupPerms: ["groupA=DENY", "groupB=SUB"]

Decision order (RocketMQ's PlainPermissionManager.validate and PlainPermissionChecker), for a
request that is not cluster traffic:
  1. the peer is in a global white-list address: allowed (no signature needed);
  2. no AccessKey: "No accessKey is configured"; unknown: "No acl config for <ak>";
  3. the peer matches the account's whiteRemoteAddress: allowed;
  4. the signature does not match: "Check signature failed for accessKey=<ak>";
  5. admin accounts may do anything; an admin code needs an admin account; each topic/group the
     request touches needs the permission (its own entry, else the default; DENY wins).
Cluster traffic (rules.Kind.CLUSTER) skips 1 and 3: it always needs a valid signature of an
admin account. Answers are RocketMQ's: SYSTEM_ERROR with the AclException text as the remark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq_ha.security import rules
from rmq_ha.security.addresses import AddressPattern, AddressPatternError, compile_pattern
from rmq_ha.security.rules import DENY, PUB, SUB, Kind, Need
from rmq_ha.security.signing import (
    ACCESS_KEY,
    SIGNATURE,
    signature_matches,
    signature_of,
)

#: RocketMQ checks accessKey and secretKey are at least this long.
MIN_KEY_LENGTH = 6

_PERMS = {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB, "DENY": DENY}
_ACCOUNT_KEYS = {
    "accessKey",
    "secretKey",
    "whiteRemoteAddress",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
}


class AclConfigError(ValueError):
    """A plain_acl.yml that cannot be used; the message names the account and the key."""


def parse_perm(text: Any, where: str) -> int:
    if text is None:
        return DENY  # RocketMQ: a missing default permission is DENY
    s = str(text).strip().replace(" ", "")
    if s not in _PERMS:
        raise AclConfigError(f"{where}: {text!r} is not one of PUB, SUB, PUB|SUB, DENY")
    return _PERMS[s]


def perm_name(perm: int) -> str:
    if perm & DENY:
        return "DENY"
    return "|".join(n for n, b in (("PUB", PUB), ("SUB", SUB)) if perm & b) or "NONE"


def check_permission(needed: int, owned: int) -> bool:
    """RocketMQ's Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & rules.ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: AddressPattern
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: Mapping[str, int] = field(default_factory=dict)
    group_perms: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AclConfig:
    accounts: Mapping[str, Account]
    global_white: tuple[AddressPattern, ...] = ()


def _perm_list(raw: Any, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise AclConfigError(f"{where}: must be a list of 'name=PERM' entries")
    out: dict[str, int] = {}
    for item in raw:
        name, sep, perm = str(item).partition("=")
        if not sep or not name.strip() or "=" in perm:
            raise AclConfigError(f"{where}: {item!r} is not 'name=PERM' (e.g. topicA=SUB)")
        out[name.strip()] = parse_perm(perm, f"{where} {name.strip()}")
    return out


def _str(v: Any) -> str:
    # YAML reads `secretKey: 12345678` as an int; RocketMQ takes it as the string.
    return "" if v is None else str(v)


def _account(raw: Any, index: int) -> Account:
    where = f"accounts[{index}]"
    if not isinstance(raw, dict):
        raise AclConfigError(f"{where}: must be a mapping")
    unknown = sorted(set(raw) - _ACCOUNT_KEYS)
    if unknown:
        raise AclConfigError(f"{where}: unknown keys {unknown}")
    ak = _str(raw.get("accessKey")).strip()
    where = f"accounts[{index}] ({ak or 'no accessKey'})"
    sk = _str(raw.get("secretKey"))
    if len(ak) < MIN_KEY_LENGTH:
        raise AclConfigError(f"{where}: accessKey must be at least {MIN_KEY_LENGTH} characters")
    if len(sk) < MIN_KEY_LENGTH:
        # never echo the secret
        raise AclConfigError(f"{where}: secretKey must be at least {MIN_KEY_LENGTH} characters")
    admin = raw.get("admin", False)
    if isinstance(admin, str) and admin.strip().lower() in ("true", "false"):
        admin = admin.strip().lower() == "true"
    if not isinstance(admin, bool):
        raise AclConfigError(f"{where}: admin must be true or false")
    try:
        white = compile_pattern(_str(raw.get("whiteRemoteAddress")))
    except AddressPatternError as e:
        raise AclConfigError(f"{where}: whiteRemoteAddress: {e}") from None
    return Account(
        access_key=ak,
        secret_key=sk,
        white_remote_address=white,
        admin=admin,
        default_topic_perm=parse_perm(raw.get("defaultTopicPerm"), f"{where}: defaultTopicPerm"),
        default_group_perm=parse_perm(raw.get("defaultGroupPerm"), f"{where}: defaultGroupPerm"),
        topic_perms=_perm_list(raw.get("topicPerms"), f"{where}: topicPerms"),
        group_perms=_perm_list(raw.get("groupPerms"), f"{where}: groupPerms"),
    )


def parse_acl(data: Any) -> AclConfig:
    """Builds the config from the parsed YAML document."""
    if not isinstance(data, dict):
        raise AclConfigError("plain_acl.yml: the document must be a mapping with 'accounts'")
    unknown = sorted(set(data) - {"accounts", "globalWhiteRemoteAddresses", "dataVersion"})
    if unknown:
        raise AclConfigError(f"plain_acl.yml: unknown top-level keys {unknown}")
    raw_accounts = data.get("accounts") or []
    if not isinstance(raw_accounts, list):
        raise AclConfigError("plain_acl.yml: accounts must be a list")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(raw_accounts):
        a = _account(raw, i)
        if a.access_key in accounts:
            raise AclConfigError(f"accounts[{i}]: accessKey {a.access_key!r} appears twice")
        accounts[a.access_key] = a
    raw_white = data.get("globalWhiteRemoteAddresses") or []
    if not isinstance(raw_white, list):
        raise AclConfigError("plain_acl.yml: globalWhiteRemoteAddresses must be a list")
    white: list[AddressPattern] = []
    for w in raw_white:
        try:
            white.append(compile_pattern(_str(w)))
        except AddressPatternError as e:
            raise AclConfigError(f"globalWhiteRemoteAddresses: {e}") from None
    return AclConfig(accounts, tuple(white))


def load_acl_text(text: str) -> AclConfig:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        # Not str(e): PyYAML quotes the offending line, which may be a secretKey's (probe).
        problem = getattr(e, "problem", None) or type(e).__name__
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise AclConfigError(f"plain_acl.yml is not YAML: {problem}{where}") from None
    return parse_acl(data)


def load_acl_file(path: str | Path) -> AclConfig:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise AclConfigError(f"cannot read ACL file {p}: {e.strerror or e}") from None
    try:
        return load_acl_text(text)
    except AclConfigError as e:
        raise AclConfigError(f"{p}: {e}") from None


# ---- the decision ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """`allowed` or not; `identity` is the access key that was verified (None when an address
    white-list let the request in); `reason` is RocketMQ's AclException text."""

    allowed: bool
    identity: str | None = None
    reason: str = ""
    cluster: bool = False


ALLOW_WHITE = Verdict(True)


def _deny(reason: str, kind: Kind) -> Verdict:
    return Verdict(False, None, reason, kind is Kind.CLUSTER)


def decide(
    acl: AclConfig,
    code: int,
    ext: Mapping[str, str],
    body: bytes | None,
    version: int,
    peer_ip: str,
) -> Verdict:
    rule = rules.rule_for(code)
    if rule is None:
        return Verdict(False, None, f"request code {code} is not classified; refused", True)
    kind = rule.kind
    inner = kind is Kind.CLUSTER
    if not inner and any(w(peer_ip) for w in acl.global_white):
        return ALLOW_WHITE
    ak = ext.get(ACCESS_KEY)
    if ak is None:
        return _deny("No accessKey is configured", kind)
    account = acl.accounts.get(ak)
    if account is None:
        return _deny(f"No acl config for {ak}", kind)
    if not inner and account.white_remote_address(peer_ip):
        return Verdict(True, ak)
    expected = signature_of(ext, body, account.secret_key, version)
    if not signature_matches(expected, ext.get(SIGNATURE)):
        return _deny(f"Check signature failed for accessKey={ak}", kind)
    if account.admin:
        return Verdict(True, ak)
    if kind is not Kind.CLIENT:
        return _deny(
            f"Need admin permission for request code={code}, but accessKey={ak} is not", kind
        )
    if rule.needs is None:
        return Verdict(True, ak)
    try:
        needs = rule.needs(ext, body)
    except Exception as e:  # a body or header we cannot read cannot be authorized
        return _deny(f"cannot read the resources of request code={code}: {e}", kind)
    for n in needs:
        denied = _check_need(account, n)
        if denied:
            return _deny(denied, kind)
    return Verdict(True, ak)


def _check_need(account: Account, need: Need) -> str:
    owned_map = account.group_perms if need.is_group else account.topic_perms
    what = f"group={need.name}" if need.is_group else f"topic={need.name}"
    if need.name in owned_map:
        if not check_permission(need.perm, owned_map[need.name]):
            return f"No permission for {what}"
        return ""
    default = account.default_group_perm if need.is_group else account.default_topic_perm
    if not check_permission(need.perm, default):
        return f"No default permission for {what}"
    return ""
