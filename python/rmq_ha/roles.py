"""`rmq-ha namesrv`, `rmq-ha broker` and `rmq-ha controller`: run a role in the foreground
until SIGINT/SIGTERM.

`--ready-file PATH` writes "host:port" to PATH (atomically) once the role is listening, so
scripts and tests can wait for readiness without parsing logs; `--metrics-file PATH` writes the
Prometheus endpoint's "host:port" (metricsExporterType=PROM; useful with
metricsPromExporterPort=0) before the ready file. `--log-format json` logs one JSON object per
line (time, level, logger, message, exception)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import faulthandler
import functools
import json
import logging
import logging.handlers
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import trio

from rmq_ha import config
from rmq_ha.cliargs import at_least
from rmq_ha.errors import ConfigError, RmqHaError, leaf_errors


def _write_ready(path: str | None, addr: str) -> None:
    if not path:
        return
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(addr)
    os.replace(tmp, p)


async def _run(
    serve: Any, cfg: Any, ready_file: str | None, metrics_file: str | None = None
) -> None:
    # The signal receiver is open before the ready file exists, so a SIGTERM sent as soon as
    # the file appears still shuts down cleanly (exit status 0).
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            on_metrics = functools.partial(_write_ready, metrics_file)
            addr = await nursery.start(functools.partial(serve, cfg, on_metrics=on_metrics))
            _write_ready(ready_file, addr)
            print(f"ready {addr}", flush=True)
            async for _ in signals:
                logging.getLogger("rmq_ha").info("shutting down")
                nursery.cancel_scope.cancel()
                break


def _known_keys(cls: Any) -> set[str]:
    return {k for f in dataclasses.fields(cls) for k in (f.name, f.metadata.get("rocketmq", ""))}


def _load(
    cls: Any, args: argparse.Namespace, overrides: dict[str, Any], also: tuple[Any, ...] = ()
) -> Any:
    """Loads `cls` from -c (or defaults); keys of the `also` classes are not reported."""
    if args.config:
        cfg, unknown = config.load(cls, args.config)
    else:
        cfg, unknown = config.from_mapping(cls, {})
    unknown = [k for k in unknown if not any(k in _known_keys(c) for c in also)]
    if unknown:
        known = sorted({k for c in (cls, *also) for k in _known_keys(c) if k and not k.islower()})
        near = {k: difflib.get_close_matches(k, known, n=1, cutoff=0.8) for k in unknown}
        typos = {k: m[0] for k, m in near.items() if m}
        log = logging.getLogger("rmq_ha")
        for k, m in sorted(typos.items()):
            log.warning("config key %s is not one rmq_ha knows: did you mean %s?", k, m)
        rest = sorted(k for k in unknown if k not in typos)
        if rest:
            log.warning("config keys not used by rmq_ha (ignored): %s", ", ".join(rest))
    set_ = {k: v for k, v in overrides.items() if v is not None}
    if not set_:
        return cfg
    out = dataclasses.replace(cfg, **set_)
    config.validate(out)  # a command-line value obeys the same rules as the file's
    return out


class JsonFormatter(logging.Formatter):
    """`--log-format json`: one JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S")
            + f".{int(record.msecs):03d}"
            + time.strftime("%z", self.converter(record.created)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def _setup_logging(
    level: str,
    fmt: str = "text",
    log_file: str | None = None,
    max_mb: int = 128,
    backups: int = 10,
) -> None:
    """Logs to stderr, or with ``log_file`` to that file alone, rotated when it would pass
    ``max_mb`` MiB, keeping ``backups`` older files (FILE.1 newest ... FILE.N oldest).
    Raises ConfigError naming the option when the file cannot be opened."""
    handler: logging.Handler
    if log_file:
        path = Path(log_file)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(
                path, maxBytes=max_mb * 1024 * 1024, backupCount=backups, encoding="utf-8"
            )
        except OSError as e:
            raise ConfigError(f"--log-file {log_file}: cannot open it: {e.strerror or e}") from e
    else:
        handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), handlers=[handler], force=True
    )


def _logging_from(role: str, args: argparse.Namespace) -> bool:
    """Sets up logging from the role's options; False (after one line on stderr) if the log
    file cannot be opened."""
    try:
        _setup_logging(
            args.log_level,
            args.log_format,
            getattr(args, "log_file", None),
            getattr(args, "log_max_mb", 128),
            getattr(args, "log_backups", 10),
        )
    except ConfigError as e:
        print(f"rmq-ha {role}: {e}", file=sys.stderr)
        return False
    return True


def run_namesrv(args: argparse.Namespace) -> int:
    from rmq_ha.nameserver.server import serve

    if not _logging_from("namesrv", args):
        return 2
    try:
        cfg = _load(
            config.NamesrvConfig,
            args,
            {"listen_port": args.listen_port, "listen_host": args.listen_host},
            also=(config.ControllerConfig,),
        )
        ccfg = None
        if cfg.enable_controller_in_namesrv:
            ccfg = _load(config.ControllerConfig, args, {}, also=(config.NamesrvConfig,))
    except ConfigError as e:
        print(f"rmq-ha namesrv: {e}", file=sys.stderr)
        return 2
    return _serve("namesrv", functools.partial(serve, controller_cfg=ccfg), cfg, args)


def run_controller(args: argparse.Namespace) -> int:
    from rmq_ha.controller.role import serve

    if not _logging_from("controller", args):
        return 2
    try:
        cfg = _load(config.ControllerConfig, args, {})
    except ConfigError as e:
        print(f"rmq-ha controller: {e}", file=sys.stderr)
        return 2
    return _serve("controller", serve, cfg, args)


def run_broker(args: argparse.Namespace) -> int:
    from rmq_ha.broker.broker import serve

    if not _logging_from("broker", args):
        return 2
    try:
        cfg = _load(
            config.BrokerConfig,
            args,
            {"listen_port": args.listen_port, "namesrv_addr": args.namesrv},
        )
    except ConfigError as e:
        print(f"rmq-ha broker: {e}", file=sys.stderr)
        return 2
    return _serve("broker", serve, cfg, args)


#: Why a role stops that an operator fixes outside it (a damaged or locked store, a file it
#: may not write, a port in use, a bad value): one line each, not a trio traceback.
_REFUSALS = (RmqHaError, OSError)


def _serve(role: str, serve: Any, cfg: Any, args: argparse.Namespace) -> int:
    """Runs the role until SIGINT/SIGTERM (exit 0). Stopped by a refusal (``_REFUSALS``): one
    line per cause on stderr, the traceback at DEBUG, exit 1; anything else is raised.

    A fatal signal (SIGBUS from a store file cut under the running process's mapping, SIGSEGV,
    SIGABRT) kills the process where no Python handler can run: faulthandler writes which
    signal it was and every thread's Python stack to stderr first (before, the process died
    with nothing said: storage probe)."""
    faulthandler.enable(file=sys.stderr, all_threads=True)
    try:
        trio.run(_run, serve, cfg, args.ready_file, args.metrics_file)
    except BaseException as e:
        log = logging.getLogger("rmq_ha")
        to_file = bool(getattr(args, "log_file", None))  # stderr gets the lines anyway
        causes = leaf_errors(e)
        if not causes or not all(isinstance(x, _REFUSALS) for x in causes):
            if to_file and not isinstance(e, KeyboardInterrupt):
                log.critical("%s stopped by an unexpected error", role, exc_info=e)
            raise
        for x in causes:
            print(f"rmq-ha {role}: cannot go on: {type(x).__name__}: {x}", file=sys.stderr)
            if to_file:
                log.error("%s cannot go on: %s: %s", role, type(x).__name__, x)
        logging.getLogger("rmq_ha").debug("%s stopped", role, exc_info=e)
        return 1
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ready-file", help="write host:port here once listening")
    p.add_argument(
        "--metrics-file",
        help="write the metrics endpoint's host:port here once it listens "
        "(metricsExporterType=PROM)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=["debug", "info", "warning", "error", "critical"],
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one JSON object per log line",
    )
    p.add_argument(
        "--log-file",
        help="log to this file instead of stderr, rotated by size (its directory is created)",
    )
    p.add_argument(
        "--log-max-mb",
        type=at_least(1),
        default=128,
        help="rotate the log file when it would pass this many MiB (default 128)",
    )
    p.add_argument(
        "--log-backups",
        type=at_least(1),
        default=10,
        help="rotated log files kept: FILE.1 (newest) .. FILE.N (default 10)",
    )


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("namesrv", help="run a name server")
    p.add_argument("-c", "--config", help="TOML or RocketMQ .conf/.properties file")
    p.add_argument("--listen-port", type=int, help="overrides listenPort (0: any free port)")
    p.add_argument("--listen-host", help="overrides listenHost")
    _common(p)
    p.set_defaults(func=run_namesrv)

    b = sub.add_parser("broker", help="run a broker")
    b.add_argument("-c", "--config", help="TOML or RocketMQ .conf/.properties file")
    b.add_argument("--listen-port", type=int, help="overrides listenPort (0: any free port)")
    b.add_argument("-n", "--namesrv", help="overrides namesrvAddr (host:port;host:port)")
    _common(b)
    b.set_defaults(func=run_broker)

    c = sub.add_parser("controller", help="run a controller node (DLedger-style Raft group)")
    c.add_argument("-c", "--config", help="TOML or RocketMQ .conf/.properties file")
    _common(c)
    c.set_defaults(func=run_controller)
