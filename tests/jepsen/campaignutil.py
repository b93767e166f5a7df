"""Shared by the campaign integration tests: whether real namespaces can be used, and the
teardown that heals and removes whatever a campaign left, even after a failure."""

import os
import shutil
import subprocess

from rmq_jepsen import hosts as hostmod
from rmq_jepsen.state import StateDir

ROOT = os.geteuid() == 0 and shutil.which("ip") is not None


def tear_down(st: StateDir, prefix: str) -> None:
    """Heal, stop every process, delete the namespaces and bridge; then check that no
    namespace named with `prefix` is left."""
    if ROOT:
        hostmod.local_down(st, log=lambda s: None)
    else:
        from rmq_jepsen.nemesis import heal_journal

        heal_journal(st, log=lambda s: None)
    leftover = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in leftover, f"namespaces left behind: {leftover}"
