"""Quix Streams, exactly once: copy a topic, as raw bytes or parsed and written as JSON.

What a Quix user writes for the project's `passthrough` job: `processing_guarantee=
"exactly-once"`, a commit every second unless told otherwise (as the PyFlink jobs checkpoint in the
benchmark), values as bytes (byte copy) or JSON in and out (a JSON copy).
"""

from __future__ import annotations

from quixstreams import Application

from bench.peers import peer_arguments


def main() -> None:
    parser = peer_arguments()
    parser.add_argument("--format", choices=["bytes", "json"], default="json")
    args = parser.parse_args()
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.commit_interval,
        state_dir=args.state_dir,
        loglevel="WARNING",
        auto_create_topics=False,
    )
    source = app.topic(args.source, value_deserializer=args.format)
    sink = app.topic(args.sink, value_serializer=args.format)
    app.dataframe(source).to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
