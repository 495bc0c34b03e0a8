"""Bytewax, copying a topic as raw bytes or parsed and written as JSON.

What a Bytewax user writes for the project's `passthrough` job with the Kafka connector's
own operators: its source batches (`batch_size` records a poll) go through
`flat_map_batch`, so the per-record work is the copy itself (orjson for JSON). Bytewax's
Kafka sink is not transactional: it writes at least once (a restart repeats the records of
the epoch it resumes from), where the PyFlink jobs and Quix write exactly once.
"""

from __future__ import annotations

import orjson
from bytewax.connectors.kafka import KafkaSinkMessage

from bench.peers import peer_arguments, run_bytewax


def main() -> None:
    parser = peer_arguments()
    parser.add_argument("--format", choices=["bytes", "json"], default="json")
    parser.add_argument("--batch", type=int, default=1000, help="records per source poll")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    if args.format == "json":

        def copy(batch):
            return [KafkaSinkMessage(m.key, orjson.dumps(orjson.loads(m.value))) for m in batch]
    else:

        def copy(batch):
            return [KafkaSinkMessage(m.key, m.value) for m in batch]

    run_bytewax(args, "copy", copy)


if __name__ == "__main__":
    main()
