"""IP allow-list patterns of RocketMQ's plain_acl.yml (`whiteRemoteAddress`,
`globalWhiteRemoteAddresses`), compiled into predicates. Pure.

Accepted forms (RocketMQ's RemoteAddressStrategyFactory, plus CIDR):
  ``*`` (or ``*.*.*.*``)      every address
  ``192.168.0.1``             one IPv4 address; ``::1`` one IPv6 address
  ``192.168.0.*``             a ``*`` matches a whole part (RocketMQ: only trailing parts)
  ``192.168.1-10.*``          a part may be a range ``a-b``
  ``192.168.0.{1,2,3}``       a part may be a list ``{a,b,...}``
  ``10.0.0.0/8``, ``fd00::/8`` CIDR networks
  empty                       nothing (the account's signature is then always checked)
IPv6 wildcards and ranges are not supported and are refused with a clear error.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

Predicate = Callable[[str], bool]


class AddressPatternError(ValueError):
    pass


def _part(text: str, pattern: str) -> Callable[[int], bool]:
    def num(s: str) -> int:
        s = s.strip()
        if not s.isdigit() or not 0 <= int(s) <= 255:
            raise AddressPatternError(
                f"address pattern {pattern!r}: {s!r} is not a number in 0..255"
            )
        return int(s)

    if text == "*":
        return lambda _v: True
    if text.startswith("{") and text.endswith("}"):
        allowed = frozenset(num(x) for x in text[1:-1].split(","))
        return lambda v: v in allowed
    if "-" in text:
        lo_s, _, hi_s = text.partition("-")
        lo, hi = num(lo_s), num(hi_s)
        if lo > hi:
            raise AddressPatternError(f"address pattern {pattern!r}: range {text} is empty")
        return lambda v: lo <= v <= hi
    n = num(text)
    return lambda v: v == n


@dataclass(frozen=True)
class AddressPattern:
    text: str
    match: Predicate

    def __call__(self, ip: str) -> bool:
        return self.match(ip)


def compile_pattern(text: str | None) -> AddressPattern:
    """Raises AddressPatternError naming the pattern and what is wrong with it."""
    t = (text or "").strip()
    if not t:
        return AddressPattern("", lambda _ip: False)
    if t in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return AddressPattern(t, lambda _ip: True)
    if "/" in t:
        try:
            net = ipaddress.ip_network(t, strict=False)
        except ValueError as e:
            raise AddressPatternError(f"address pattern {t!r}: {e}") from None

        def in_net(ip: str) -> bool:
            try:
                return ipaddress.ip_address(ip) in net
            except ValueError:
                return False

        return AddressPattern(t, in_net)
    if ":" in t:
        if any(c in t for c in "*-{,"):
            raise AddressPatternError(
                f"address pattern {t!r}: IPv6 wildcards, ranges and lists are not supported "
                "(use one address or a CIDR network)"
            )
        try:
            one6 = ipaddress.ip_address(t)
        except ValueError as e:
            raise AddressPatternError(f"address pattern {t!r}: {e}") from None
        return AddressPattern(t, lambda ip: _same(ip, one6))
    parts = t.split(".")
    if len(parts) != 4:
        raise AddressPatternError(f"address pattern {t!r}: an IPv4 pattern has 4 parts")
    preds = [_part(p.strip(), t) for p in parts]

    def match4(ip: str) -> bool:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address):
            if addr.ipv4_mapped is None:
                return False
            addr = addr.ipv4_mapped
        return all(p(v) for p, v in zip(preds, addr.packed, strict=True))

    return AddressPattern(t, match4)


def _same(ip: str, want: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    try:
        return ipaddress.ip_address(ip) == want
    except ValueError:
        return False


def host_of(peer: str) -> str:
    """The host part of "host:port" (IPv6 hosts may come bracketed)."""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return host.strip("[]")
