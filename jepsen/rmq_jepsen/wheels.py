"""The three wheels of a checkout (`make wheels`; `python -m rmq_jepsen.wheels --out dist`):

* `rmq-ha`: the broker, name server, controller, client and CLI with the Rust core, built by
  maturin with the Cargo profile `wheel` (the release build without debug info, stripped) and
  linked by zig (`ziglang` from PyPI) against glibc 2.17, so the wheel is tagged
  manylinux2014 / manylinux_2_17: it installs on every current LTS distribution (RHEL and its
  rebuilds 8+, Ubuntu 20.04+, Debian 11+, SLES 15, Amazon Linux 2), not only on the build
  machine's glibc. maturin refuses the tag if the library needs newer symbols.
* `rmq-jepsen` (the bench, its benchmarks, demos and launcher) and `rmq-check` (the checker):
  pure Python, built from a copy of their directories so the checkout gets no build debris.

The bench uses `build_rmq_ha` to make the wheel it installs on SSH / Vagrant hosts when it runs
from a checkout and no `--wheel` is given. `--requirements` prints what the three wheels depend
on (from the three pyproject.toml files), for `make wheelhouse`: those dependencies as wheels,
so that a test can install the three wheels into a fresh virtualenv without the network.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

#: The glibc baseline of the rmq-ha wheel (PEP 600 tag; manylinux2014 is its alias).
MANYLINUX = "manylinux_2_17"
#: The Cargo profile of wheels (Cargo.toml): release without debug info, stripped.
PROFILE = "wheel"
PURE = {"rmq-jepsen": "jepsen", "rmq-check": "spark"}


class WheelError(RuntimeError):
    pass


def _venv_env() -> dict[str, str]:
    """This interpreter's bin directory first on PATH: maturin finds `python3 -m ziglang` there."""
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}


def _newest(out: Path, pattern: str) -> Path:
    got = sorted(out.glob(pattern), key=lambda p: p.stat().st_mtime)
    if not got:
        raise WheelError(f"no {pattern} was built into {out}")
    return got[-1]


def build_rmq_ha(checkout: Path, out: Path, *, manylinux: str = MANYLINUX) -> Path:
    """maturin build --profile wheel --zig --compatibility <manylinux>; the wheel's path."""
    maturin = Path(sys.executable).with_name("maturin")
    if not maturin.exists():
        found = shutil.which("maturin")
        if found is None:
            raise WheelError("maturin is not installed (`make dev` installs it)")
        maturin = Path(found)
    if importlib.util.find_spec("ziglang") is None:
        raise WheelError(
            "the rmq-ha wheel links with zig for its manylinux baseline: pip install ziglang "
            "(`make dev` installs it)"
        )
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rmq_ha-*.whl"):
        old.unlink()
    cmd = [
        str(maturin),
        "build",
        "--profile",
        PROFILE,
        "--zig",
        "--compatibility",
        manylinux,
        "--interpreter",
        sys.executable,
        "-o",
        str(out),
    ]
    _run(cmd, checkout)
    return _newest(out, "rmq_ha-*.whl")


def build_pure(src: Path, out: Path) -> Path:
    """A pure-Python package's wheel (pip wheel --no-deps), built from a copy of `src`."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rmq-wheel-") as d:
        copy = Path(d) / src.name
        shutil.copytree(
            src, copy, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__")
        )
        before = set(out.glob("*.whl"))
        _run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(copy)],
            copy,
        )
        new = set(out.glob("*.whl")) - before
    if not new:
        return _newest(out, "*.whl")  # rebuilt under an existing name
    return max(new, key=lambda p: p.stat().st_mtime)


def build_all(checkout: Path, out: Path) -> dict[str, Path]:
    """rmq-ha, rmq-jepsen, rmq-check -> their wheels in `out`."""
    got = {"rmq-ha": build_rmq_ha(checkout, out)}
    for name, sub in PURE.items():
        for old in out.glob(f"{name.replace('-', '_')}-*.whl"):
            old.unlink()
        got[name] = build_pure(checkout / sub, out)
    return got


def requirements(checkout: Path) -> list[str]:
    """The dependencies of the three wheels (their pyproject.toml files), without the three."""
    ours = {"rmq-ha", *PURE}
    out: dict[str, None] = {}
    for sub in (".", *PURE.values()):
        project = tomllib.loads((checkout / sub / "pyproject.toml").read_text())["project"]
        for req in project.get("dependencies", []):
            m = re.match(r"[A-Za-z0-9._-]+", req)
            if m is None or m.group(0).lower().replace("_", "-") not in ours:
                out[req] = None
    return list(out)


def _run(cmd: list[str], cwd: Path) -> None:
    p = subprocess.run(
        cmd, cwd=cwd, env=_venv_env(), capture_output=True, text=True, timeout=3600, check=False
    )
    if p.returncode != 0:
        raise WheelError(
            f"`{' '.join(cmd)}` exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )


def main(argv: list[str] | None = None) -> int:
    from rmq_jepsen import checkout as co

    ap = argparse.ArgumentParser(prog="python -m rmq_jepsen.wheels", description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("dist"), help="where the wheels go")
    ap.add_argument("--checkout", type=Path, help=f"the source checkout (default: ${co.ENV}, ...)")
    ap.add_argument(
        "--requirements", action="store_true", help="print the wheels' dependencies, one a line"
    )
    args = ap.parse_args(argv)
    root = args.checkout or co.find(cwd=True)
    if root is None or not co.is_checkout(root):
        print(f"no rmq_ha source checkout (give --checkout or set {co.ENV})", file=sys.stderr)
        return 2
    if args.requirements:
        print("\n".join(requirements(root)))
        return 0
    try:
        wheels = build_all(root, args.out.resolve())
    except WheelError as e:
        print(f"wheels: {e}", file=sys.stderr)
        return 1
    for name, path in wheels.items():
        print(f"{name:11s} {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
