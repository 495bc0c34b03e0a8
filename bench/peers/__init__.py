"""The apps a user would write instead, with the peer's own documented patterns."""

from __future__ import annotations

import argparse


def peer_arguments() -> argparse.ArgumentParser:
    """What every peer app is told: where to read and write, as which consumer group."""
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--source", "--sink", "--group", "--state-dir"):
        parser.add_argument(name, required=True)
    parser.add_argument(
        "--commit-interval", type=float, default=1.0, help="seconds (the jobs' checkpoint interval)"
    )
    return parser


def run_bytewax(args: argparse.Namespace, name: str, step) -> None:
    """A Bytewax dataflow reading `args.source` in polls of `args.batch` records, `step`
    applied to each poll (`flat_map_batch`: one call per poll, not per record), written
    to `args.sink`, on `args.workers` worker threads, an epoch per commit interval."""
    from datetime import timedelta

    import bytewax.operators as op
    from bytewax.connectors.kafka import operators as kop
    from bytewax.dataflow import Dataflow
    from bytewax.run import cli_main

    flow = Dataflow(name)
    source = kop.input(
        "in", flow, brokers=[args.bootstrap], topics=[args.source], batch_size=args.batch
    )
    out = op.flat_map_batch(name, source.oks, step)
    kop.output("out", out, brokers=[args.bootstrap], topic=args.sink)
    cli_main(
        flow,
        workers_per_process=args.workers,
        epoch_interval=timedelta(seconds=args.commit_interval),
    )
