"""The live display of a campaign: phase, time, ops/s, ok/fail/info, faults in force. A rich
panel on a terminal; a plain line every few seconds otherwise (CI logs, tests)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from rmq_jepsen.recorder import Recorder


class Progress:
    def __init__(self, enabled: bool = True, *, out: Any = None, plain_every_s: float = 10.0):
        self.out = out or sys.stderr
        self.enabled = enabled
        self.fancy = enabled and getattr(self.out, "isatty", lambda: False)()
        self.plain_every_s = plain_every_s
        self.phase = "setup"
        self.total_s = 0.0
        self.t0 = time.monotonic()
        self.faults: Callable[[], list[str]] = list
        self.recorder: Recorder | None = None
        self._last_ops = 0
        self._last_t = time.monotonic()
        self._rate = 0.0
        self._last_plain = 0.0
        self._live: Any = None

    def set_phase(self, phase: str, total_s: float = 0.0) -> None:
        self.phase = phase
        self.total_s = total_s
        self.t0 = time.monotonic()
        self.message(f"phase: {phase}")
        self.tick(force=True)

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._live is not None:
            self._live.console.print(text)
        else:
            print(text, file=self.out, flush=True)

    def _counts(self) -> dict[str, int]:
        out = {"ok": 0, "fail": 0, "info": 0}
        if self.recorder is not None:
            for (f, t), n in self.recorder.counts.items():
                if t in out and f != "poll":
                    out[t] += n
        return out

    def line(self) -> str:
        c = self._counts()
        el = time.monotonic() - self.t0
        tot = f"/{self.total_s:.0f}" if self.total_s else ""
        faults = ", ".join(self.faults()) or "none"
        return (
            f"[{self.phase}] {el:5.1f}{tot} s  {self._rate:7.1f} ops/s  ok {c['ok']}  "
            f"fail {c['fail']}  info {c['info']}  faults: {faults}"
        )

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.recorder is not None and now - self._last_t >= 0.5:
            ops = self.recorder.ops
            self._rate = (ops - self._last_ops) / (now - self._last_t)
            self._last_ops, self._last_t = ops, now
        if not self.enabled:
            return
        if self.fancy:
            from rich.live import Live
            from rich.panel import Panel

            panel = Panel(self.line(), title="rmq-ha campaign")
            if self._live is None:
                self._live = Live(panel, refresh_per_second=4, transient=False)
                self._live.start()
            else:
                self._live.update(panel)
        elif force or now - self._last_plain >= self.plain_every_s:
            self._last_plain = now
            print(self.line(), file=self.out, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
