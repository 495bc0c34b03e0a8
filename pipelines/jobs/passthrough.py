"""Kafka topic -> Kafka topic, exactly once: the smallest job with every production part.

Copy this when a job needs no enrichment; the wiring is the same as `enrich` without the
async stage.
"""

from __future__ import annotations

import sys

from pipelines.settings import Settings


def build(env, settings: Settings) -> None:
    from pyflink.common import Types, WatermarkStrategy

    from pipelines.kafka import build_sink, build_source, origin_type_info

    records = env.from_source(
        build_source(settings), WatermarkStrategy.no_watermarks(), "kafka-source",
        type_info=origin_type_info(),
    ).uid("kafka-source")
    values = (records
              .map(lambda r: bytes(r.value or b"").decode("utf-8", errors="replace"),
                   output_type=Types.STRING())
              .name("decode").uid("decode"))
    values.sink_to(build_sink(settings)).name("kafka-sink").uid("kafka-sink")


def main(argv: list[str] | None = None) -> None:
    from pipelines.runner import job_main

    job_main("passthrough", build, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
