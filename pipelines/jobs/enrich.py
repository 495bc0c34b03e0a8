"""Kafka -> parse -> slow async enrichment -> Kafka, exactly once; bad records to dead letters.

The job of shared/seeds/000: a slow external lookup per record. Done right: the lookup is
async, so checkpoints (and the offset commits that ride on them) keep completing while
thousands of lookups are in flight.
"""

from __future__ import annotations

import sys

from pipelines.settings import ConfigError, Settings

# External services this job calls: preflight checks that each answers.
USES = ("enrichment",)


def build(env, settings: Settings) -> None:
    if not settings.sink.dead_letter_topic:
        raise ConfigError("sink.dead_letter_topic: required by the enrich job; malformed "
                          "records must go somewhere, never silently dropped")
    from pyflink.common import Types, WatermarkStrategy

    from pipelines.enrichment import apply_enrichment
    from pipelines.kafka import build_sink, build_source, origin_type_info
    from pipelines.parse import make_parse_function
    from pipelines.settings import EnrichmentOperator
    from pipelines.stages import parse_in_batches

    raw = env.from_source(build_source(settings, USES), WatermarkStrategy.no_watermarks(),
                          "kafka-source", type_info=origin_type_info()).uid("kafka-source")
    cfg = settings.enrichment
    if cfg.operator is EnrichmentOperator.BATCHED:
        parsed, parse_dead = parse_in_batches(raw, settings, cfg.effective_batch_size(),
                                              cfg.batch_delay, trace_timing=cfg.trace_timing)
    else:  # one record per element: the operators `make bench-operators` compares against
        parse_fn, dead_letters_tag = make_parse_function(
            settings.parse, settings.faults, settings.job.name,
            trace_timing=cfg.trace_timing, errors=settings.errors,
            dead_letter_max_bytes=settings.sink.dead_letter_bytes(settings.kafka))
        parsed = raw.process(parse_fn, output_type=Types.STRING()).name("parse").uid("parse")
        parse_dead = parsed.get_side_output(dead_letters_tag)
    enriched, enrich_dead = apply_enrichment(parsed, settings)
    enriched.sink_to(build_sink(settings)).name("kafka-sink").uid("kafka-sink")
    (parse_dead.union(enrich_dead)
     .sink_to(build_sink(settings, settings.sink.dead_letter_topic, id_suffix="-dlq"))
     .name("dead-letter-sink").uid("dead-letter-sink"))


def main(argv: list[str] | None = None) -> None:
    from pipelines.runner import job_main

    job_main("enrich", build, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
