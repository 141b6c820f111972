"""The `kqp` command: run, check-config, demo, top, explain, recommend, report, bench, sasl-credential, quotas,
compile.

Every wrong input is refused with one line on stderr and exit code 2; the proxy itself exits 0 after
a clean SIGTERM. A flag a subcommand does not know is refused by that subcommand, with its usage and
the nearest flag it has, rather than by `kqp` with the list of commands. `check-config` also warns,
exit status still 0, of legal values that may surprise (config/surprises.py).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from kqp.config.errors import ConfigError
from kqp.config.loader import load_config, with_overrides
from kqp.config.model import ProxyConfig
from kqp.config.surprises import surprises
from kqp.proxy.runtime import loops
from kqp.proxy.runtime.logs import setup_logging
from kqp.proxy.runtime.preflight import preflight
from kqp.proxy.runtime.workers import WorkerSeat, run_workers

from . import explain_cli, hot_path, metrics_endpoint, quotas_cli, recommend, report, sasl_credential
from .allocator import tune_malloc

EXIT_USAGE = 2


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser that refuses what it does not know itself. argparse hands a
    subcommand's leftovers up to `kqp`, whose error shows the top-level usage; here the subcommand
    shows its own, and every error names the flag meant where a given one is close to it."""

    _given: Sequence[str] = ()

    def parse_known_args(self, args: Sequence[str] | None = None,   # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(args or ())
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        super().error(message + self._nearest())

    def _nearest(self) -> str:
        """`; did you mean --config?` for each given flag that is none of ours (nor a prefix of one)."""
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        given = (word.split("=", 1)[0] for word in self._given if word.startswith("--"))
        hints = [close[0] for flag in given if not any(f.startswith(flag) for f in flags)
                 if (close := difflib.get_close_matches(flag, flags, n=1, cutoff=0.6))]
        return f"; did you mean {', '.join(dict.fromkeys(hints))}?" if hints else ""


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto",
                   help="event loop implementation (default: uvloop when installed)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", default="text", choices=["text", "json"])


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags that change what `kqp run` starts, which `kqp check-config` checks alike."""
    p.add_argument("--upstream", help="HOST:PORT[,HOST:PORT...] upstream bootstrap servers (overrides the file)")
    p.add_argument("--listen", help="HOST:PORT of the bootstrap listener (overrides the file)")
    p.add_argument("--advertised-host", help="host written into rewritten broker addresses")
    p.add_argument("--workers", type=int, default=1,
                   help="processes sharing the ports with SO_REUSEPORT; they hold one quota between them")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kqp", description="A quota-enforcing Kafka proxy.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=SubcommandParser)

    run = sub.add_parser("run", help="run the proxy")
    run.add_argument("--config", "-c", help="YAML config file")
    _add_run_flags(run)
    _add_common(run)

    check = sub.add_parser("check-config", help="refuse, without starting, whatever `kqp run` would refuse "
                                                "with this file and these flags; warn of surprising values")
    check.add_argument("config")
    _add_run_flags(check)

    demo = sub.add_parser("demo", help="embedded upstream + kqp + clients exceeding a quota")
    demo.add_argument("--seconds", type=float, default=10.0, help="how long the throttled producer runs")
    demo.add_argument("--spark", action="store_true", help="run the PySpark sink scene (needs pyspark)")
    plot = demo.add_mutually_exclusive_group()
    plot.add_argument("--plot", metavar="PATH", type=Path,
                      help="where to write the throttled producer's rate plot, a PNG (default: a new "
                           "temporary directory; the path is printed; needs matplotlib)")
    plot.add_argument("--no-plot", action="store_true", help="do not draw the plot")
    _add_common(demo)

    top = sub.add_parser("top", help="live view of a running kqp's entities, rates and throttling")
    metrics_endpoint.add_flags(top, "/metrics")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    top.add_argument("--once", action="store_true", help="print one plain-text frame and exit")

    explain_cli.add_parser(sub)
    recommend.add_parser(sub)
    report.add_parser(sub)
    sasl_credential.add_parser(sub)
    quotas_cli.add_parser(sub)
    hot_path.add_parser(sub)

    bench = sub.add_parser("bench", help="benchmark kqp side by side with direct, relay and tansu proxy",
                           add_help=False)
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    return parser


def _load(args: argparse.Namespace) -> ProxyConfig | None:
    """The config `kqp run` would start with, or None where it would not start, said as one line on
    stderr: the same code for `run` and `check-config`."""
    try:
        cfg = load_config(args.config) if args.config else None
        config = with_overrides(cfg, upstream=args.upstream, listen=args.listen, advertised_host=args.advertised_host)
        preflight(config, args.workers)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return None
    if (refused := hot_path.refusal()) is not None:
        print(refused, file=sys.stderr)
        return None
    return config


def cmd_run(args: argparse.Namespace) -> int:
    if (config := _load(args)) is None:
        return EXIT_USAGE
    setup_logging(args.log_level, args.log_format)
    tune_malloc()  # before any worker is forked: they inherit it
    logging.getLogger("kqp").info("request path: %s", hot_path.describe().line)   # _load refused a stale one
    overrides = {"upstream": args.upstream, "listen": args.listen, "advertised_host": args.advertised_host}

    def run_one(cfg: ProxyConfig, seat: WorkerSeat | None = None) -> int:
        from kqp.proxy.runtime.server import ProxyServer

        async def main() -> int:
            server = ProxyServer(cfg, overrides=overrides, reuse_port=args.workers > 1, seat=seat)
            return await server.run()

        try:
            return loops.run(main(), args.loop)
        except (OSError, ConfigError) as exc:
            logging.getLogger("kqp").error("cannot start: %s", exc)
            return EXIT_USAGE

    if args.workers > 1:
        return run_workers(config, args.workers, run_one)
    return run_one(config)


def cmd_check(args: argparse.Namespace) -> int:
    if (config := _load(args)) is None:
        return EXIT_USAGE
    for surprise in surprises(config):
        print(surprise.line(config.source), file=sys.stderr)
    entities = len(config.quotas.entities)
    print(f"{args.config}: ok (listen {config.listen}, {len(config.upstream.bootstrap_servers)} upstream "
          f"bootstrap server(s), {entities} quota entit{'y' if entities == 1 else 'ies'})")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    setup_logging("warning" if args.log_level == "info" else args.log_level, args.log_format)
    from .demo import run_demo

    return run_demo(seconds=args.seconds, spark=args.spark, loop_choice=args.loop, plot=args.plot,
                    draw=not args.no_plot)


def cmd_top(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        print("--interval: must be a positive number of seconds", file=sys.stderr)
        return EXIT_USAGE
    try:
        url = metrics_endpoint.endpoint_url(args, "/metrics")
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    from .top import run_top

    return run_top(url, args.interval, once=args.once)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        from kqp.proxy.bench import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    handlers = {"run": cmd_run, "check-config": cmd_check, "demo": cmd_demo, "top": cmd_top,
                "sasl-credential": sasl_credential.run, "quotas": quotas_cli.run, "explain": explain_cli.run,
                "recommend": recommend.run, "report": report.run, "compile": hot_path.run}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
