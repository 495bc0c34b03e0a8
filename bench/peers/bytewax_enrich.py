"""Bytewax with a slow lookup per record: its best pattern for the enrich job.

Bytewax runs each worker's steps on one thread, with no async operator. The fastest shape
is one round trip per source poll: `flat_map_batch` sends a poll's records (`--batch`) to
the same `POST /lookup/batch` the project's coalescing client and the Quix peer use, and
`--workers` threads (at most one per partition) keep that many round trips in flight.
Bytewax's Kafka sink writes at least once (not transactional).
"""

from __future__ import annotations

import json
import urllib.request

import orjson
from bytewax.connectors.kafka import KafkaSinkMessage

from bench.peers import peer_arguments, run_bytewax


def main() -> None:
    parser = peer_arguments()
    parser.add_argument("--url", required=True)
    parser.add_argument("--batch", type=int, default=500, help="records per source poll")
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()
    batch_url = args.url.rstrip("/") + "/lookup/batch"

    def enrich(batch):
        records = [orjson.loads(m.value) for m in batch]
        body = json.dumps({"companies": [r["company"] for r in records]}).encode()
        request = urllib.request.Request(
            batch_url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            results = orjson.loads(resp.read())["results"]
        return [
            KafkaSinkMessage(m.key, orjson.dumps({**r, "enrichment": p}))
            for m, r, p in zip(batch, records, results)
        ]

    run_bytewax(args, "enrich", enrich)


if __name__ == "__main__":
    main()
