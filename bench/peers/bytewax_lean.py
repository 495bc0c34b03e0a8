"""Bytewax at its best on this machine: one process per core, lean Kafka I/O, batched lookups.

What a Bytewax expert writes for the project's jobs on a 2-core machine, where the stock
peers (bytewax_copy, bytewax_enrich) run one process with Bytewax's own Kafka connectors:

- `--processes` Bytewax processes (`cli_main` with a process id and every process's
  address, all on loopback), each with one worker and its own GIL;
- a source on Bytewax's partitioned-source API: a confluent-kafka consumer per partition
  that hands the flow plain (key, value) pairs, `--batch` records a poll;
- a sink on the dynamic-sink API: a confluent-kafka producer per worker, fed pairs;
- orjson for the JSON copy and the lookups' bodies;
- enrichment: each poll's records split into `--lookup-batch`-record `POST /lookup/batch`
  requests, `--in-flight` at a time per process, on keep-alive connections.

Like Bytewax's own Kafka sink it writes at least once (no transactions).
"""

from __future__ import annotations

import argparse
import http.client
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import orjson

from bench.peers import peer_arguments

IDLE_POLL = timedelta(milliseconds=5)  # how soon an idle partition is polled again


def arguments() -> argparse.ArgumentParser:
    parser = peer_arguments()
    parser.add_argument("--work", choices=["bytes", "json", "enrich"], default="json")
    parser.add_argument("--url", help="the enrichment service (with --work enrich)")
    parser.add_argument("--batch", type=int, default=10_000, help="records per source poll")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--lookup-batch", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=32, help="lookups in flight per process")
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--addresses", help=argparse.SUPPRESS)
    return parser


# -- the source and the sink -------------------------------------------------------------


def source(args):
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    class Partition(StatefulSourcePartition):
        def __init__(self, partition: int, resume: int | None):
            self.consumer = Consumer(
                {
                    "bootstrap.servers": args.bootstrap,
                    "group.id": args.group,
                    "enable.auto.commit": False,
                    "fetch.max.bytes": 104_857_600,
                    "max.partition.fetch.bytes": 10_485_760,
                    "queued.min.messages": args.batch * 2,
                }
            )
            start = OFFSET_BEGINNING if resume is None else resume
            self.consumer.assign([TopicPartition(args.source, partition, start)])
            self.offset = resume
            self.awake: datetime | None = None

        def next_batch(self):
            # What the client has fetched already, never a wait: Bytewax's worker runs
            # every partition and step on one thread, so a blocking poll stalls them all.
            messages = self.consumer.consume(args.batch, 0)
            now = datetime.now(timezone.utc)
            self.awake = None if messages else now + IDLE_POLL
            if messages:
                self.offset = messages[-1].offset() + 1
            return [(m.key(), m.value()) for m in messages if m.error() is None]

        def next_awake(self):
            return self.awake

        def snapshot(self):
            return self.offset

        def close(self):
            self.consumer.close()

    class Source(FixedPartitionedSource):
        def list_parts(self):
            from confluent_kafka.admin import AdminClient

            admin = AdminClient({"bootstrap.servers": args.bootstrap})
            topic = admin.list_topics(args.source, timeout=30).topics[args.source]
            return [str(p) for p in sorted(topic.partitions)]

        def build_part(self, step_id, for_part, resume_state):
            return Partition(int(for_part), resume_state)

    return Source()


def sink(args):
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from confluent_kafka import Producer

    class Writer(StatelessSinkPartition):
        def __init__(self):
            self.producer = Producer(
                {"bootstrap.servers": args.bootstrap, "linger.ms": 5, "batch.size": 262_144}
            )

        def write_batch(self, items):
            produce = self.producer.produce
            for key, value in items:
                while True:
                    try:
                        produce(args.sink, value, key)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
            self.producer.poll(0)

        def close(self):
            self.producer.flush(60)

    class Sink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return Writer()

    return Sink()


# -- the work ----------------------------------------------------------------------------


def copy_json(batch):
    loads, dumps = orjson.loads, orjson.dumps
    return [(key, dumps(loads(value))) for key, value in batch]


class Lookups:
    """Batched lookups on keep-alive connections, one per thread of a pool."""

    def __init__(self, url: str, batch: int, in_flight: int):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.path = parts.path.rstrip("/") + "/lookup/batch"
        self.batch = batch
        self.pool = ThreadPoolExecutor(in_flight)
        self.local = threading.local()

    def _post(self, companies: list[str]) -> list:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        body = orjson.dumps({"companies": companies})
        conn.request("POST", self.path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"lookup answered {response.status}: {data[:200]!r}")
        return orjson.loads(data)["results"]

    def __call__(self, batch):
        records = [orjson.loads(value) for _, value in batch]
        chunks = [records[i : i + self.batch] for i in range(0, len(records), self.batch)]
        answers = self.pool.map(self._post, [[r["company"] for r in c] for c in chunks])
        out, dumps = [], orjson.dumps
        for chunk, results in zip(chunks, answers):
            for record, profile in zip(chunk, results):
                record["enrichment"] = profile
                out.append(dumps(record))
        return [(key, value) for (key, _), value in zip(batch, out)]


def flow(args):
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow

    work: Callable[[list], list]
    if args.work == "enrich":
        work = Lookups(args.url, args.lookup_batch, args.in_flight)
    else:
        work = {"bytes": lambda batch: batch, "json": copy_json}[args.work]
    dataflow = Dataflow(f"lean-{args.work}")
    pairs = op.input("in", dataflow, source(args))
    op.output("out", op.flat_map_batch(args.work, pairs, work), sink(args))
    return dataflow


# -- the processes -----------------------------------------------------------------------


def loopback_ports(count: int) -> list[int]:
    """`count` ports free on loopback now (the processes bind them right after)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_processes(args) -> int:
    """Starts `--processes` copies of this app as one Bytewax cluster on loopback and waits
    for them; SIGTERM or SIGINT is passed on to each and waited for."""
    addresses = ";".join(f"127.0.0.1:{p}" for p in loopback_ports(args.processes))
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.peers.bytewax_lean", *sys.argv[1:]]
            + ["--process-id", str(i), "--addresses", addresses]
        )
        for i in range(args.processes)
    ]

    def stop(signum, _frame):
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [child.wait() for child in children]
    return next((c for c in codes if c), 0)


def main() -> None:
    args = arguments().parse_args()
    if args.process_id is None:
        sys.exit(run_processes(args))
    from bytewax.run import cli_main

    cli_main(
        flow(args),
        workers_per_process=1,
        process_id=args.process_id,
        addresses=args.addresses.split(";"),
        epoch_interval=timedelta(seconds=args.commit_interval),
    )


if __name__ == "__main__":
    main()
