"""Shared by the tests of pausing processes (rmq_jepsen.launch, rmq_jepsen.control): a program
whose threads keep a group stop busy, and the states of a process's threads."""

from pathlib import Path

#: Eight threads busy in user space; then, when `child` is set in the program's globals
#: (see `busy_program`), a child process; then "up" on stdout and a long sleep.
_BUSY = r"""
import subprocess, sys, threading, time
def spin():
    while True:
        sum(range(1000))
for _ in range(8):
    threading.Thread(target=spin, daemon=True).start()
if WITH_CHILD:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print("child", child.pid, flush=True)
print("up", flush=True)
time.sleep(300)
"""


def busy_program(with_child: bool = False) -> str:
    """Python source: eight busy threads (and a child process when `with_child`)."""
    return f"WITH_CHILD = {with_child!r}\n" + _BUSY


def thread_states(pid: int) -> list[str]:
    """The state letter of every thread of `pid` (Linux /proc)."""
    return [
        (t / "stat").read_text().rsplit(")", 1)[1].split()[0]
        for t in Path(f"/proc/{pid}/task").iterdir()
    ]
