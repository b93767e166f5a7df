"""Permission bits of topics and brokers (RocketMQ `PermName`).

A QueueData's `perm` and a TopicConfig's `perm` use these bits; 6 (read + write) is the default.
The name server clears PERM_WRITE to fence a broker (wipe write perm, acting-master prime slave).
"""

from __future__ import annotations

from typing import Final

PERM_PRIORITY: Final = 8
PERM_READ: Final = 4
PERM_WRITE: Final = 2
PERM_INHERIT: Final = 1

#: Read + write: the default `brokerPermission` and `TopicConfig.perm`.
PERM_RW: Final = PERM_READ | PERM_WRITE


def is_readable(perm: int) -> bool:
    return perm & PERM_READ == PERM_READ


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE


def is_inherited(perm: int) -> bool:
    return perm & PERM_INHERIT == PERM_INHERIT


def is_priority(perm: int) -> bool:
    return perm & PERM_PRIORITY == PERM_PRIORITY


def is_accessible(perm: int) -> bool:
    """Readable or writeable."""
    return is_readable(perm) or is_writeable(perm)


def is_valid(perm: int) -> bool:
    """RocketMQ accepts 0..7 from admin requests (the priority bit is not settable)."""
    return 0 <= perm < PERM_PRIORITY


def without_write(perm: int) -> int:
    """The perm with the write bit cleared (how the name server fences a broker)."""
    return perm & ~PERM_WRITE


def perm_to_string(perm: int) -> str:
    """`RWX`-style text as RocketMQ prints it: R readable, W writeable, X inherited."""
    return (
        ("R" if is_readable(perm) else "-")
        + ("W" if is_writeable(perm) else "-")
        + ("X" if is_inherited(perm) else "-")
    )
