"""Log lines that a misbehaving peer can repeat at will, throttled.

A client that speaks plaintext to a TLS-enforcing port, or sends garbage, is closed at once and
reconnects in a tight loop: one WARNING per connection was 5,198 lines in 14 s (probe). Each
kind of line is logged at most once per `every_s`; the next one says how many were held back,
so nothing is hidden, only counted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class LogThrottle:
    def __init__(self, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        #: key -> (when its last line was logged, lines held back since)
        self._state: dict[str, tuple[float, int]] = {}

    def log(self, logger: logging.Logger, level: int, key: str, msg: str, *args: object) -> bool:
        """Logs `msg % args` unless a line of `key` was logged less than `every_s` ago
        (then it is counted); returns whether it was logged. Keys are a fixed set of kinds,
        never a peer's address, so the table stays small."""
        now = self.clock()
        last, held = self._state.get(key, (None, 0))
        if last is not None and now - last < self.every_s:
            self._state[key] = (last, held + 1)
            return False
        if held:
            msg += " (and %d more like it in the last %.0f s, not logged)"
            args = (*args, held, now - last if last is not None else 0.0)
        logger.log(level, msg, *args)
        self._state[key] = (now, 0)
        return True


#: The roles' remoting servers and connections share one.
THROTTLE = LogThrottle()
