"""Errors of the Python client. Every one says whether the failed operation *certainly* had no
effect (`definite`), so a caller (the bench) can record `fail` for definite errors and `info`
(unknown outcome) for the others.

* A name-server or route problem, a bad argument, a connect error, or an error code from the
  broker: nothing was stored -> definite.
* A timeout or a connection closed while waiting: the broker may have stored the message ->
  not definite.
"""

from __future__ import annotations

from dataclasses import dataclass

from rmq_ha.errors import RmqHaError
from rmq_ha.protocol.codes import code_name


class ClientError(RmqHaError):
    """Base of the client's own errors."""


class ClientStateError(ClientError):
    """The producer/consumer is not started, or already closed."""

    definite = True


class InvalidMessageError(ClientError, ValueError):
    """A message the client refuses before sending (RocketMQ's Validators)."""

    definite = True


class RouteNotFoundError(ClientError):
    """No route for a topic from any name server (or no name server answered)."""

    definite = True

    def __init__(self, message: str, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


class BrokerNotFoundError(ClientError):
    """No address for a broker name in the cached routes."""

    definite = True

    def __init__(self, message: str, broker_name: str) -> None:
        super().__init__(message)
        self.broker_name = broker_name


class BrokerResponseError(ClientError):
    """The server answered with an error code (RocketMQ's MQBrokerException): the request was
    refused, so it had no effect."""

    definite = True

    def __init__(self, code: int, remark: str | None, addr: str) -> None:
        super().__init__(
            f"{addr} answered {code} ({code_name(code, response=True)}): {remark or ''}"
        )
        self.code = code
        self.remark = remark
        self.addr = addr


@dataclass(frozen=True, slots=True)
class SendAttempt:
    """One try of a send: where it went and how it failed."""

    broker_name: str
    addr: str | None
    queue_id: int
    error: str
    definite: bool
    elapsed_s: float
    code: int | None = None


class SendError(ClientError):
    """A send failed after every allowed attempt. `definite` is True only when every attempt
    certainly failed (so the message is certainly not stored); `attempts` lists them."""

    def __init__(
        self,
        message: str,
        *,
        definite: bool,
        attempts: tuple[SendAttempt, ...] = (),
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.definite = definite
        self.attempts = attempts
        self.code = code


class SendTimeoutError(SendError):
    """The last attempt got no answer in time (or the connection dropped while waiting): the
    message may have been stored. Never definite."""

    def __init__(self, message: str, *, attempts: tuple[SendAttempt, ...] = ()) -> None:
        super().__init__(message, definite=False, attempts=attempts)


__all__ = [
    "BrokerNotFoundError",
    "BrokerResponseError",
    "ClientError",
    "ClientStateError",
    "InvalidMessageError",
    "RouteNotFoundError",
    "SendAttempt",
    "SendError",
    "SendTimeoutError",
]
