"""The one exception hierarchy of rmq_ha.

Every Rust error variant of `rmq_store::StoreError` maps to exactly one class here (the mapping
lives in crates/rmq-py). Client-visible errors say whether they are *definite*: a definite error
means the operation certainly did not happen, so the bench can record `fail` rather than `info`.
"""

from __future__ import annotations


class RmqHaError(Exception):
    """Base of every rmq_ha error."""

    #: True when the failed operation certainly had no effect.
    definite: bool = False


class StoreError(RmqHaError):
    """An error from the storage engine."""


class StoreIOError(StoreError):
    """The operating system failed an I/O call on a store file."""

    def __init__(self, message: str, path: str | None = None, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = errno


class CorruptRecordError(StoreError):
    """A record failed validation (magic, sizes, CRC, position); it is never returned."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class QuarantinedRecordError(CorruptRecordError):
    """The bytes at ``offset`` are a quarantined damaged range of ``size`` bytes: never served
    until repaired with good bytes from a replica (`Store.repair_record`)."""

    def __init__(self, message: str, offset: int | None = None, size: int | None = None) -> None:
        super().__init__(message, offset)
        self.size = size


class CorruptFileError(StoreError):
    """A whole metadata file (epoch file, checkpoint, ...) failed its checks."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class OffsetOutOfRangeError(StoreError):
    """An offset outside ``[min, max)``; reading past the end is this error."""

    definite = True

    def __init__(
        self,
        message: str,
        offset: int | None = None,
        min: int | None = None,  # noqa: A002 - mirrors the Rust field names
        max: int | None = None,  # noqa: A002
    ) -> None:
        super().__init__(message)
        self.offset = offset
        self.min = min
        self.max = max


class EpochConflictError(StoreError):
    """An epoch-file change that would break its ordering invariants."""

    definite = True


class MessageIllegalError(StoreError):
    """A message the store refuses (too large, bad topic, ...). Nothing was written."""

    definite = True


class ConfigError(RmqHaError, ValueError):
    """A configuration value is invalid; ``key`` names it."""

    definite = True

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class InvalidArgumentError(StoreError, ValueError):
    """An argument the operation cannot accept; nothing changed."""

    definite = True


class StoreClosedError(StoreError):
    """The store was closed."""

    definite = True


__all__ = [
    "ConfigError",
    "CorruptFileError",
    "CorruptRecordError",
    "EpochConflictError",
    "InvalidArgumentError",
    "MessageIllegalError",
    "OffsetOutOfRangeError",
    "QuarantinedRecordError",
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingDecodeError",
    "RemotingError",
    "RemotingTimeoutError",
    "RmqHaError",
    "StoreClosedError",
    "StoreError",
    "StoreIOError",
]


class RemotingError(RmqHaError):
    """A remoting (network protocol) failure."""


class RemotingConnectError(RemotingError):
    """Could not connect: the request was never sent."""

    definite = True


class RemotingTimeoutError(RemotingError):
    """No response in time: the request may or may not have taken effect."""


class RemotingClosedError(RemotingError):
    """The connection closed while a request was outstanding: outcome unknown."""


class RemotingDecodeError(RemotingError):
    """Malformed bytes from a peer (a remoting frame or a batch body); ``offset`` is where the
    bad frame (or batch entry) starts. The connection cannot be trusted after it."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


def leaf_errors(e: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or `e` itself: what a trio nursery
    raised, as an operator needs to read it."""
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in leaf_errors(sub)]
    return [e]
