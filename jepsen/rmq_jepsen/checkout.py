"""Where the rmq_ha source checkout is, if there is one.

The bench runs from installed wheels as well as from a checkout. Only a few things need the
checkout: building the rmq-ha wheel for remote hosts when no `--wheel` is given, the Vagrant
files, the git revision recorded in config.json, and the Java/Maven builds of the interop
harness (the real RocketMQ baseline of `bench produce` / `bench ha`). Each asks `find()` and
says what to do when it finds none.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Points the bench at a checkout when it runs from wheels.
ENV = "RMQ_HA_SOURCE"


def is_checkout(root: Path) -> bool:
    """rmq_ha's sources: the workspace with the PyO3 crate, and the bench beside it."""
    return (root / "crates" / "rmq-py" / "Cargo.toml").is_file() and (
        root / "jepsen" / "pyproject.toml"
    ).is_file()


def find(require: str | None = None, *, cwd: bool = False) -> Path | None:
    """The checkout: $RMQ_HA_SOURCE, else the one this package was installed from (editable:
    jepsen/rmq_jepsen/ inside it; from a wheel this is site-packages, which is none), else
    (with `cwd`) the current directory. `require`: a path the checkout must contain."""
    candidates: list[Path] = []
    if os.environ.get(ENV):
        candidates.append(Path(os.environ[ENV]))
    candidates.append(Path(__file__).resolve().parents[2])
    if cwd:
        candidates.append(Path.cwd())
    for root in candidates:
        if is_checkout(root) and (require is None or (root / require).exists()):
            return root.resolve()
    return None
