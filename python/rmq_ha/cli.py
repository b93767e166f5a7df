"""The one `rmq-ha` command. Subcommands are added by the roles as they land."""

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

    bench = sub.add_parser("bench", help="benchmarks (figure, baseline and ratio in one run)")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    from rmq_ha.bench import store as bench_store

    bench_store.add_parser(bench_sub)
    from rmq_ha.bench import produce as bench_produce

    bench_produce.add_parser(bench_sub)
    from rmq_ha.bench import controller as bench_controller

    bench_controller.add_parser(bench_sub)
    from rmq_ha.bench import ha as bench_ha

    bench_ha.add_parser(bench_sub)
    from rmq_ha.bench import acting as bench_acting

    bench_acting.add_parser(bench_sub)

    args_in = sys.argv[1:] if argv is None else argv
    if not args_in or args_in[0] not in _CORE_ROLES:
        _load_plugins(sub, bench_sub)

    demo = sub.add_parser("demo", help="demonstrations a newcomer can watch")
    demo_sub = demo.add_subparsers(dest="demo", required=True)
    from rmq_ha import demo as demo_mod

    demo_mod.add_parser(demo_sub)

    args = parser.parse_args(argv)
    rc: int = args.func(args)
    return rc


PLUGIN_GROUP = "rmq_ha.cli"
#: Server roles start without loading the tools' plugins (faster, and a broken tool install
#: cannot stop a broker).
_CORE_ROLES = frozenset({"namesrv", "broker", "controller"})


def _load_plugins(sub: Any, bench_sub: Any) -> None:
    """Tools that live above rmq_ha (the bench in jepsen/, the checker in spark/) add their
    subcommands through the ``rmq_ha.cli`` entry point group, so rmq_ha never imports them:
    each entry point names a function ``add_parsers(sub, bench_sub)``."""
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
