"""The one `rmq-ha` command: the roles, the client and the controller admin live here; the
tools above rmq_ha (the bench and its benchmarks and demos in rmq-jepsen, the checker in
rmq-check) add their subcommands as plugins."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rmq-ha", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)

    from rmq_ha import clientcli, roles

    roles.add_parsers(sub)
    clientcli.add_parsers(sub)
    from rmq_ha.controller import admin as controller_admin

    controller_admin.add_parsers(sub)
    from rmq_ha import mqadmin

    mqadmin.add_parsers(sub)

    bench = sub.add_parser("bench", help="benchmarks (figure, baseline and ratio in one run)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCHMARK")

    args_in = sys.argv[1:] if argv is None else argv
    if not args_in or args_in[0] not in _CORE_ROLES:
        _load_plugins(sub, bench_sub)
    if not bench_sub.choices:
        bench.set_defaults(func=_no_bench)
    else:
        bench_sub.required = True

    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


PLUGIN_GROUP = "rmq_ha.cli"
#: Server roles start without loading the tools' plugins (faster, and a broken tool install
#: cannot stop a broker).
_CORE_ROLES = frozenset({"namesrv", "broker", "controller"})


def _no_bench(args: argparse.Namespace) -> int:
    print(
        "rmq-ha bench: the benchmarks are in the rmq-jepsen package, which is not installed "
        "(`make dev` in a checkout, or pip install the rmq_jepsen wheel from `make wheels`)",
        file=sys.stderr,
    )
    return 2


def _load_plugins(sub: Any, bench_sub: Any) -> None:
    """Tools that live above rmq_ha (the bench, its benchmarks and demos in jepsen/, the checker
    in spark/) add their subcommands through the ``rmq_ha.cli`` entry point group, so rmq_ha
    never imports them: each entry point names a function ``add_parsers(sub, bench_sub)``."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            add = ep.load()
        except Exception as e:  # one broken tool must not take the others down
            print(f"rmq-ha: plugin {ep.name} ({ep.value}) failed to load: {e}", file=sys.stderr)
            continue
        add(sub, bench_sub)


if __name__ == "__main__":
    sys.exit(main())
