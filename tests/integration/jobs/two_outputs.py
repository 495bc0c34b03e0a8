"""One input, parsed twice, two exactly-once sinks to two topics: what the stages must
allow a job to do (issue "stages compose"). Run as `python -m tests.integration.jobs.
two_outputs --set KEY=VALUE ...` over passthrough's config, on a local mini-cluster: every
record with an id to `sink.topic`, those that also have a string `tag` to `STRICT_TOPIC`
(`--strict-topic`), the dead letters of both parses to `sink.dead_letter_topic`."""

from __future__ import annotations

import argparse

from pipelines import stages
from pipelines.flink.environment import MINI_CLUSTER_ON_LOOPBACK, create_environment
from pipelines.settings import FieldType, Settings, load_settings


def build(env, settings: Settings, strict_topic: str) -> None:
    raw = stages.kafka_source(env, settings)
    parsed, bad = stages.parse(raw, settings)
    tagged, untagged = stages.parse(
        raw, settings, name="parse-tagged", extra_required={"tag": FieldType.STRING}
    )
    stages.kafka_sink(stages.records(parsed), settings)
    stages.kafka_sink(
        stages.records(tagged, name="tagged-records"),
        settings,
        name="tagged-sink",
        topic=strict_topic,
    )
    stages.dead_letter_sink(settings, bad, untagged)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--strict-topic", required=True)
    args = parser.parse_args()
    settings = load_settings("passthrough", overrides=args.overrides).settings
    env = create_environment(settings, MINI_CLUSTER_ON_LOOPBACK)
    build(env, settings, args.strict_topic)
    env.execute("two-outputs")


if __name__ == "__main__":
    main()
