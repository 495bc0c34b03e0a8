"""Quix Streams, exactly once, with a slow lookup per record: the peer's best pattern.

Quix Streams has no async operator: a blocking call per record runs at 1/latency records/s.
The fastest documented shape is to gather records in a tumbling count window and look the
window's records up together. This one sends each window's records to the same service the
project's job calls, in one `POST /lookup/batch` (the round trip the project's coalescing
client makes), so the comparison is of the frameworks, not the request pattern. `--lookup
gets` is the other pattern a Quix user may write: a GET per record, a window's GETs
concurrently on a thread pool (bench/results/peer-search.txt measures both).

Count windows are per message key: the benchmark keys its input records so that every
window fills (records per key divisible by the window size).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from quixstreams import Application

from bench.peers import peer_arguments


def main() -> None:
    parser = peer_arguments()
    parser.add_argument("--url", required=True)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument(
        "--lookup",
        choices=["batch", "gets"],
        default="batch",
        help="one POST per window, or one GET per record, all of a window's concurrently",
    )
    args = parser.parse_args()
    batch_url = args.url.rstrip("/") + "/lookup/batch"
    pool = ThreadPoolExecutor(max_workers=min(args.window, 64))

    def lookup(company: str) -> dict:
        url = f"{args.url.rstrip('/')}/lookup?{urllib.parse.urlencode({'company': company})}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            return json.load(resp)

    def enrich(records: list[dict]) -> list[dict]:
        if args.lookup == "gets":
            found = list(pool.map(lookup, [r["company"] for r in records]))
            return [{**r, "enrichment": p} for r, p in zip(records, found)]
        body = json.dumps({"companies": [r["company"] for r in records]}).encode()
        request = urllib.request.Request(
            batch_url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            results = json.load(resp)["results"]
        return [{**r, "enrichment": p} for r, p in zip(records, results)]

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        loglevel="WARNING",
        auto_create_topics=True,
    )
    source = app.topic(args.source, value_deserializer="json")
    sink = app.topic(args.sink, value_serializer="json")
    sdf = app.dataframe(source)
    sdf = sdf.tumbling_count_window(args.window).collect().final()
    sdf = sdf.apply(lambda window: enrich(window["value"]), expand=True)
    sdf.to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
