"""Quix Streams, exactly once, with a slow lookup per record: the peer's best pattern.

Quix Streams has no async operator: a blocking call per record runs at 1/latency records/s.
The fastest documented shape is to gather records in a tumbling count window and look the
window's records up together. This one sends each window's records to the same service the
project's job calls, in one `POST /lookup/batch` (the round trip the project's coalescing
client makes), so the comparison is of the frameworks, not the request pattern.

Count windows are per message key: the benchmark keys its input records so that every
window fills (records per key divisible by the window size).
"""

from __future__ import annotations

import json
import urllib.request

from quixstreams import Application

from bench.peers import peer_arguments


def main() -> None:
    parser = peer_arguments()
    parser.add_argument("--url", required=True)
    parser.add_argument("--window", type=int, default=100)
    args = parser.parse_args()
    batch_url = args.url.rstrip("/") + "/lookup/batch"

    def enrich(records: list[dict]) -> list[dict]:
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
        commit_interval=1.0,
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
