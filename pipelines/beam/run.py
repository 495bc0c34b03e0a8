"""`pipelines beam run NAME`: a Beam pipeline of pipelines/beam, run locally on Prism or the
DirectRunner, owned like `pipelines run` owns a Flink job.

Everything it starts (Prism's job server, Beam's Java worker and expansion service) is in
a process group it ends on every path; Ctrl-C or SIGTERM cancels the pipeline. The hangs
Beam is known for here become one-line errors: a Java side that dies (watched), a job
that never starts (deadline), a bounded read that could never finish (preflight), a
bounded run that stops moving (beam.stall_timeout).
"""

from __future__ import annotations

import importlib
import logging
import math
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines import beam
from pipelines.beam import java
from pipelines.beam.java import BeamSetupError, dead_service, free_port, start_listening
from pipelines.host.loopback import BEAM_WORKER_POOL, bind_grpc_to_loopback
from pipelines.host.paths import local_state
from pipelines.kafka.clients import client_config
from pipelines.running.errors import Failure
from pipelines.running.loading import load
from pipelines.running.loading import preflight as run_preflight_rules
from pipelines.running.processes import ProcessGroups
from pipelines.running.stopping import StopRequested, StopSignals
from pipelines.running.worker_output import WorkerOutput
from pipelines.settings import BeamRunner, ConfigError, Settings
from pipelines.settings.client_properties import librdkafka_config

log = logging.getLogger(__name__)

# How long a runner has to confirm a cancel before its processes are ended. Prism took
# over 10 s once under a full test suite on 2 cores; 18 s still leaves the stop watchdog
# (27 s, every stop within 30 s) time to end what is left.
CANCEL_TIMEOUT_S = 18.0
# How long a failed pipeline waits to learn whether a Java service's exit caused it: a
# killed process's sockets close before its exit is reported, and on a loaded machine the
# runner can fail in between.
DEAD_SERVICE_GRACE_S = 5.0
NO_JAVA = java.JavaServices(expansion_port=0, worker_port=0)  # a streaming run: none to watch
TERMINAL = {"DONE", "FAILED", "CANCELLED", "UPDATED", "DRAINED"}


@dataclass(frozen=True)
class BeamJob:
    """A Beam pipeline as the settings loader reads it: its name and its own sections."""

    name: str
    sections: tuple = ()


def beam_job_names() -> list[str]:
    return beam.names()


def load_beam_job(name: str):
    if name not in beam_job_names():
        raise Failure(f"no Beam job named {name!r} (Beam jobs here: {', '.join(beam_job_names())})")
    return importlib.import_module(f"pipelines.beam.{name}")


def bounded_read_problem(
    settings: Settings,
    end_offsets: dict[tuple[str, int], int],
    start_offsets: dict[tuple[str, int], int],
) -> str | None:
    """KafkaIO's bounded read spreads beam.max_records evenly over the partitions and waits
    until each has given its share: one short partition and it waits forever."""
    cfg = settings.beam
    if cfg.streaming or cfg.max_records is None or not end_offsets:
        return None
    share = math.ceil(cfg.max_records / len(end_offsets))
    short = {
        tp: end_offsets[tp] - start_offsets.get(tp, 0)
        for tp in end_offsets
        if end_offsets[tp] - start_offsets.get(tp, 0) < share
    }
    if not short:
        return None
    listed = ", ".join(f"{t}[{p}] has {n}" for (t, p), n in sorted(short.items()))
    return (
        f"beam.max_records: {cfg.max_records} over {len(end_offsets)} partitions is "
        f"{share} from each, and {listed} after the start offset: the read would wait "
        f"forever. Lower beam.max_records, or use beam.max_read_time"
    )


def _offsets(settings: Settings) -> tuple[dict, dict]:
    """(end offsets, committed offsets of the group) per partition, from the broker."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = client_config(settings.kafka.bootstrap_servers, librdkafka_config(settings.kafka))
    consumer = Consumer({**conf, "group.id": settings.source.group_id, "enable.auto.commit": False})
    try:
        ends, starts = {}, {}
        for topic in settings.source.topics:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            parts = [TopicPartition(topic, p) for p in meta.partitions]
            for tp in parts:
                ends[(topic, tp.partition)] = consumer.get_watermark_offsets(tp, timeout=10)[1]
            for attempt in range(10):  # a broker just started may still load its coordinator
                try:
                    committed = consumer.committed(parts, timeout=10)
                    break
                except KafkaException:
                    if attempt == 9:
                        raise
                    time.sleep(1)
            for tp in committed:
                if tp.offset >= 0:
                    starts[(topic, tp.partition)] = tp.offset
        return ends, starts
    finally:
        consumer.close()


def preflight(settings: Settings, module, skip: bool) -> None:

    if skip:
        return
    run_preflight_rules(settings, uses=module.USES, client=module.lookup_client(settings))
    if not settings.beam.streaming and settings.beam.max_records:
        problem = bounded_read_problem(settings, *_offsets(settings))
        if problem:
            raise ConfigError(problem)


def start_prism(owner: ProcessGroups, binary: Path, deadline_s: float = 60.0) -> str:
    """Prism's job server in a process group `owner` ends; returns its endpoint."""
    port = free_port()
    command = [str(binary), f"-job_port={port}", "-serve_http=false", "-log_level=warn"]
    try:
        start_listening(
            owner, "Prism", command, port, local_state("logs", "beam-prism.log"), deadline_s
        )
    except BeamSetupError as exc:
        raise Failure(str(exc)) from None
    return f"127.0.0.1:{port}"


def pipeline_options(settings: Settings, job_endpoint: str | None):
    from apache_beam.options.pipeline_options import PipelineOptions

    cfg = settings.beam
    args = [f"--job_name={settings.job.name}"]
    if cfg.runner is BeamRunner.PRISM:
        args += [
            "--runner=PortableRunner",
            f"--job_endpoint={job_endpoint}",
            "--environment_type=LOOPBACK",
            f"--job_server_timeout={max(1, cfg.job_server_timeout // 1000)}",
        ]
    else:
        args += ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
    if cfg.streaming:
        args.append("--streaming")
    return PipelineOptions(args)


class OutputCounter:
    """Records written to the sink and dead-letter topics since the run started, read from
    the broker (end offsets): the same figure on every runner, metrics or not. Counts
    include aborted or duplicate writes, as an at-least-once sink's output does."""

    def __init__(self, settings: Settings):
        from confluent_kafka import Consumer

        conf = client_config(settings.kafka.bootstrap_servers, librdkafka_config(settings.kafka))
        self.consumer = Consumer({**conf, "group.id": "pipelines-progress"})
        topics = {"out": settings.sink.topic, "dead letters": settings.sink.dead_letter_topic}
        self.topics = {label: topic for label, topic in topics.items() if topic}
        self.start = {label: self._end(topic) or 0 for label, topic in self.topics.items()}
        self.last = dict.fromkeys(self.topics, 0)

    def _end(self, topic: str) -> int | None:
        """The topic's log-end offsets summed, or None when the broker did not answer."""
        from confluent_kafka import TopicPartition

        try:
            meta = self.consumer.list_topics(topic, timeout=5).topics[topic]
            return sum(
                self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                for p in meta.partitions
            )
        except Exception:  # noqa: BLE001 - progress is a nicety: keep the last figure
            return None

    def totals(self) -> dict[str, int]:
        for label, topic in self.topics.items():
            end = self._end(topic)
            if end is not None:
                self.last[label] = end - self.start[label]
        return dict(self.last)

    def close(self) -> None:
        self.consumer.close()


def progress_line(totals: dict[str, int]) -> str:
    return f"records out {totals.get('out', 0)}, dead letters {totals.get('dead letters', 0)}"


def run(name: str, args) -> int:
    """Run Beam job `name` until it ends (bounded) or is stopped (streaming)."""
    import sys

    module = load_beam_job(name)
    bind_grpc_to_loopback(BEAM_WORKER_POOL)  # Beam's LOOPBACK pool binds [::] otherwise
    owner = ProcessGroups()
    stops = StopSignals(owner).install()
    holder: dict = {}  # the PipelineResult once submitted, for a stop to cancel
    pipeline = None
    # Beam's SDK harness runs here (LOOPBACK) and writes tracebacks of its threads to stderr,
    # and its own log lines to the root logger: both to a log file, the CLI says one line.
    sys.stderr = WorkerOutput(sys.stderr, local_state("logs", f"beam-{name}-python.log"))
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    try:
        loaded = load(BeamJob(name, module.SECTIONS), args)
        settings = loaded.settings
        preflight(settings, module, args.skip_preflight)

        # KafkaIO's Java side for bounded runs; streaming reads and writes in Python.
        streaming = settings.beam.streaming
        try:
            if not streaming:
                java.ensure_java()
            prism = java.ensure_prism() if settings.beam.runner is BeamRunner.PRISM else None
            services = NO_JAVA if streaming else java.start_java_services(owner)
        except java.BeamSetupError as exc:
            raise Failure(str(exc)) from None
        endpoint = start_prism(owner, prism) if prism else None
        import apache_beam as beam

        pipeline = beam.Pipeline(options=pipeline_options(settings, endpoint))
        module.build(pipeline, settings, None if streaming else services.expansion_address)
        mode = "streaming" if settings.beam.streaming else "bounded"
        log.info(f"beam job {name} starting on {settings.beam.runner.value} ({mode})")
        progress = OutputCounter(settings)
        try:
            result = _run_watched(pipeline, settings, progress, services, holder)
            state = str(result.state).rsplit(".", 1)[-1]
            log.info(progress_line(progress.totals()))
        finally:
            progress.close()
        if state != "DONE":
            raise Failure(
                dead_service(services, grace_s=DEAD_SERVICE_GRACE_S)
                or f"beam job {name} ended {state}; see .local/logs/beam-*.log"
            )
        log.info(f"beam job {name} finished")
        return 0
    except StopRequested as stop:
        if holder.get("result") is not None:
            log.info(f"stopping ({stop.signame}): cancelling the pipeline")
            _cancel(holder["result"])
        else:  # the DirectRunner (or a job not yet accepted): its Java side goes first
            log.info(f"stopping ({stop.signame}): ending the run with its Java side")
        log.info(f"beam job {name} cancelled")
        return 0
    finally:
        # sys.stderr stays the worker log: Beam's harness threads report their shutdown
        # after this returns, and the CLI exits next.
        owner.end()
        stops.restore()
        if pipeline is not None:  # Beam removes it when run() returns, not on a stop
            shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)


def _run_watched(pipeline, settings: Settings, progress: OutputCounter, services, holder: dict):
    """pipeline.run(), then wait for the end with progress lines, a start deadline and,
    for bounded runs, the stall watchdog. The result goes into `holder` when there is one."""

    def submit():
        try:
            holder["result"] = pipeline.run()
        except BaseException as exc:  # noqa: BLE001 - reported in the main thread
            holder["error"] = exc

    # DirectRunner runs the whole pipeline inside run(), and has no result (nothing to
    # cancel, no state) until the end: no start deadline for it. Portable runners (Prism)
    # return once the job is accepted, which must happen within beam.start_timeout.
    thread = threading.Thread(target=submit, name="beam-run", daemon=True)
    thread.start()
    started = time.monotonic()
    start_deadline_s = (
        None if settings.beam.runner is BeamRunner.DIRECT else settings.beam.start_timeout / 1000
    )
    last_totals, moved_at, shown = None, time.monotonic(), None
    stall_s = settings.beam.stall_timeout / 1000
    while True:
        thread.join(timeout=1.0)
        if "error" in holder:
            raise Failure(
                dead_service(services, grace_s=DEAD_SERVICE_GRACE_S)
                or f"beam pipeline failed: {_one_line(holder['error'])}"
            )

        dead = dead_service(services)
        if dead and not ("result" in holder and _state(holder["result"]) in TERMINAL):
            if "result" in holder:
                _cancel(holder["result"])
            raise Failure(dead)
        alive = thread.is_alive()  # before reading the result: run() sets it, then ends
        result = holder.get("result")
        if result is None:
            if start_deadline_s is not None and time.monotonic() - started > start_deadline_s:
                raise Failure(
                    f"the pipeline was not accepted within {start_deadline_s:.0f} s "
                    f"(beam.start_timeout); see .local/logs/beam-*.log"
                )
            if not alive and "error" not in holder:
                raise Failure("the Beam runner returned no result; see .local/logs/beam-*.log")
            continue
        state = str(result.state).rsplit(".", 1)[-1]
        if state in TERMINAL and not thread.is_alive():
            return result
        totals = progress.totals()
        if totals != last_totals:
            last_totals, moved_at = totals, time.monotonic()
            line = progress_line(totals)
            if line != shown:
                log.info(line)
                shown = line
        elif not settings.beam.streaming and stall_s > 0 and time.monotonic() - moved_at > stall_s:
            _cancel(result)
            raise Failure(
                f"the bounded run made no progress for {stall_s:.0f} s "
                f"(beam.stall_timeout); cancelled"
            )


def _state(result) -> str:
    return str(result.state).rsplit(".", 1)[-1]


def _cancel(result) -> None:
    done = threading.Event()

    def cancel():
        try:
            result.cancel()
        except Exception:  # noqa: BLE001 - already ended
            pass
        done.set()

    started = time.monotonic()
    threading.Thread(target=cancel, name="beam-cancel", daemon=True).start()
    if not done.wait(CANCEL_TIMEOUT_S):
        log.info(f"cancel did not confirm within {CANCEL_TIMEOUT_S:.0f} s; ending its processes")
    else:
        log.info(f"the runner confirmed the cancel in {time.monotonic() - started:.1f} s")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]
