"""Every use of PyFlink's private API, in one place, each written for apache-flink 2.2.1.

PyFlink has no public way to start its gateway JVM in a process group of our choosing, to
read a mini-cluster's REST address, or to wait on a Java future with a deadline. Each
function here reaches one internal; tests/unit/test_flink_compat.py runs each against the
pinned wheel, so an upgrade that moves one fails a test instead of a job.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections import deque
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from pipelines.running.loopback import PYFLINK_WORKER_POOL, bind_grpc_to_loopback, preload_env
from pipelines.running.paths import local_state, private_dir, write_whole

FLINK_VERSION = "2.2.1"


@contextmanager
def gateway_in_group(owner):
    """Start PyFlink's gateway JVM (the local mini-cluster) in a new process group owned
    by `owner` (a processes.ProcessGroups); everything the JVM starts inherits the group.

    PyFlink 2.2: `java_gateway.launch_gateway()` calls `launch_gateway_server_process`,
    which calls `pyflink_gateway_server.Popen`; both names are swapped for the call only.
    The JVM's stderr (a pipe PyFlink never reads) is drained into a bounded tail, so a
    chatty JVM can never block on a full pipe.
    """
    import pyflink.java_gateway as java_gateway
    import pyflink.pyflink_gateway_server as gateway_server

    original_launch = java_gateway.launch_gateway_server_process
    original_popen = gateway_server.Popen

    def popen_in_group(*args, **kwargs):
        # The JVM's stdout too: PyFlink leaves it on the terminal, where a restarting job's
        # uncaught-exception traces (40 lines each) flooded the progress lines.
        kwargs.setdefault("stdout", subprocess.PIPE)

        kwargs["env"] = preload_env(kwargs.get("env") or dict(os.environ))
        if args and isinstance(args[0], list):
            scratch = owner.scratch_dir("pipelines-jvm-")
            args = (in_temp_dir(with_reporters(args[0]), scratch), *args[1:])
        proc = subprocess.Popen(*args, process_group=0, **kwargs)
        owner.adopt(proc.pid)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                GATEWAY_STDERR.follow(stream)
        return proc

    def launch(env, args):
        # Its log in a 0700 directory of ours with the environment kept out: by default it
        # is site-packages/pyflink/log (0644), and the Python workers' environment (a job
        # section's `${env:}` secret among it) was logged there when they closed.
        env.setdefault("FLINK_LOG_DIR", str(private_dir(local_state("logs"))))
        env.setdefault("LOG4J_PROPERTIES", str(gateway_log_config()))
        gateway_server.Popen = popen_in_group
        try:
            return original_launch(env, args)
        finally:
            gateway_server.Popen = original_popen

    java_gateway.launch_gateway_server_process = launch
    try:
        yield
    finally:
        java_gateway.launch_gateway_server_process = original_launch


# Flink and Beam log a process's whole environment, and environments hold secrets (a job
# config's `${env:}` values, a job section's secrets on a TaskManager): PythonEnvUtils logs
# the `flink run` client's Python process's at INFO (the canary test found the truststore
# password there); Beam's DefaultJobBundleFactory logs a Python worker's (the TaskManager's
# environment) at INFO when the worker closes and at WARN when its clean-up fails.
QUIET_ENVIRONMENT_LOGS = """
# pipelines: these two log a process's whole environment (its secrets) at INFO or WARN
logger.pythonenv.name = org.apache.flink.client.python.PythonEnvUtils
logger.pythonenv.level = WARN
logger.workerenv.name = org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory
logger.workerenv.level = ERROR
"""


def quiet_environment_logs(path: Path, start: Path | None = None) -> None:
    """QUIET_ENVIRONMENT_LOGS appended (once) to the log4j properties file `path`, or to a
    copy of `start` where `path` does not exist yet. Written whole, by a rename: two local
    runs starting at once (two test workers) each wrote the file in two steps, and one could
    read the other's half-written file and append to it."""
    if path.exists():
        text = path.read_text()
    else:
        text = start.read_text() if start else ""
    if "logger.workerenv.name" in text:
        return
    whole = text.rstrip("\n") + "\n" + QUIET_ENVIRONMENT_LOGS
    write_whole(path, lambda partial: partial.write_text(whole))


def gateway_log_config() -> Path:
    """The local gateway JVM's log4j config: the wheel's CLI config, environment kept out."""
    import pyflink

    path = private_dir(local_state("flink-gateway")) / "log4j-cli.properties"
    quiet_environment_logs(path, Path(pyflink.__file__).parent / "conf" / "log4j-cli.properties")
    return path


def reporter_jars() -> list[Path]:
    """The wheel's Prometheus reporter (plugins/metrics-prometheus)."""
    import pyflink

    root = Path(pyflink.__file__).parent / "plugins" / "metrics-prometheus"
    return sorted(root.glob("flink-metrics-prometheus-*.jar"))


def with_reporters(command: list[str]) -> list[str]:
    """The gateway command with the Prometheus reporter on its class path. A mini-cluster
    finds reporter factories on its class path only, not in the plugins directory a
    cluster reads ("could not be found for reporter prom. Available factories: []"); the
    jar is inert unless metrics.reporter.* names it."""
    if "-cp" not in command:
        return command
    at = command.index("-cp") + 1
    extra = [str(p) for p in reporter_jars()]
    return [*command[:at], os.pathsep.join([command[at], *extra]), *command[at + 1 :]]


def in_temp_dir(command: list[str], directory: Path) -> list[str]:
    """The gateway command with its JVM's temp dir, and so the mini-cluster's io.tmp.dirs
    (its working directory, blob store, extracted RPC jar), in `directory`: the JVM is
    ended, not closed, so it never removes them itself, and the owner removes the
    directory once the JVM is gone."""
    return [command[0], f"-Djava.io.tmpdir={directory}", *command[1:]]


class _StderrTail:
    """The gateway JVM's output: its last lines kept for error messages, all of it in a
    log file once `log_to` names one (a local run's .local/logs/<job>-jvm.log)."""

    def __init__(self, lines: int = 50):
        self.lines: deque[str] = deque(maxlen=lines)
        self.path: Path | None = None
        self._file: TextIO | None = None
        self._lock = threading.Lock()

    def log_to(self, path: Path) -> None:
        self.path = path

    def _write(self, line: str) -> None:
        """Append to the log; where it cannot be written (a read-only image), keep only the
        tail: the pump must go on draining, or the JVM blocks on a full pipe."""
        if self.path is None:
            return
        try:
            if self._file is None or self._file.name != str(self.path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
                self.path.chmod(0o600)  # also a log an older run left 0644
            self._file.write(line + "\n")
            self._file.flush()
        except OSError:
            self.path, self._file = None, None

    def follow(self, stream) -> None:
        def pump():
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip()
                self.lines.append(line)
                if self.path is not None:
                    with self._lock:
                        self._write(line)

        threading.Thread(target=pump, name="gateway-output", daemon=True).start()


GATEWAY_STDERR = _StderrTail()


def disconnect_gateway() -> None:
    """Mark PyFlink's Py4J client disconnected before its JVM is ended, so that nothing
    (Py4J's finalizers releasing Java objects at exit, say) tries to reach a dead JVM and
    logs a stack trace. A flag only (py4j 0.10.9: `GatewayClient.is_connected`): no
    network call on the way out."""
    import pyflink.java_gateway as java_gateway

    gateway = getattr(java_gateway, "_gateway", None)
    if gateway is not None:
        gateway._gateway_client.is_connected = False


def gateway_started() -> bool:
    """Whether this process has a PyFlink gateway already (PyFlink 2.2: `_gateway`)."""
    import pyflink.java_gateway as java_gateway

    return getattr(java_gateway, "_gateway", None) is not None


def java_job_client(client):
    """The Java JobClient behind PyFlink's JobClient (PyFlink 2.2: `_j_job_client`)."""
    return client._j_job_client


def mini_cluster_rest_url(client) -> str:
    """The REST address the mini-cluster bound, read from the job client.

    The mini-cluster binds port 0 and the kernel picks: choosing a free port beforehand and
    handing it over races with every other bind in the JVM. PyFlink
    has no accessor for the address, so this reads MiniClusterJobClient's cluster (Flink 2.2).
    """
    j_client = java_job_client(client)
    field = j_client.getClass().getDeclaredField("miniCluster")
    field.setAccessible(True)
    return str(field.get(j_client).getRestAddress().get().toString()).rstrip("/")


def start_mini_cluster(config: dict[str, str], slots: int):
    """A MiniCluster started in this process's gateway JVM, for jobs submitted to it one
    after another; `close()` it (the JVM ending ends it too).

    PyFlink's local target starts a new MiniCluster for every execute and shuts it down
    after: a second of each `pipelines.testing.run`. Flink 2.2:
    `org.apache.flink.runtime.minicluster.MiniCluster` and its configuration builder.
    """
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    j_config = jvm.org.apache.flink.configuration.Configuration()
    for key, value in config.items():
        j_config.setString(key, value)
    builder = jvm.org.apache.flink.runtime.minicluster.MiniClusterConfiguration.Builder()
    j_cluster = jvm.org.apache.flink.runtime.minicluster.MiniCluster(
        builder.setConfiguration(j_config)
        .setNumTaskManagers(1)
        .setNumSlotsPerTaskManager(slots)
        .build()
    )
    j_cluster.start()
    return j_cluster


def mini_cluster_port(j_cluster) -> int:
    """The REST port a started MiniCluster bound (it binds port 0 and the kernel picks)."""
    return int(j_cluster.getRestAddress().get().getPort())


def in_process_worker_pool() -> str:
    """The address of PyFlink's Python worker pool in this process, started once and bound
    to loopback: jobs whose configuration names it (`python.loopback-server.address`) run
    their Python operators in threads here instead of a `pyflink-udf-runner` process each.

    PyFlink 2.2 starts it only for its own local target
    (`StreamExecutionEnvironment._open`): `BeamFnLoopbackWorkerPoolServicer` is a
    singleton whose `start()` returns the address it serves on."""
    bind_grpc_to_loopback(PYFLINK_WORKER_POOL)  # it binds [::] otherwise
    from pyflink.fn_execution.beam.beam_worker_pool_service import (
        BeamFnLoopbackWorkerPoolServicer,
    )

    return str(BeamFnLoopbackWorkerPoolServicer().start())


# What the TaskManager runs (via pyflink-udf-runner.sh, as `$python -m ...beam_boot --id=..
# --provision_endpoint=..`) to have a Python worker started: this hands the worker's id,
# provision endpoint and environment to the pool of the process that wrote it, over
# loopback, then holds until that worker ends. PyFlink's beam_boot does the same over gRPC
# but first imports apache_beam: 1.5-2 s of every job, most of a logic test's time.
_BOOT_SCRIPT = """#!/bin/bash
# pipelines: a Python worker for the in-process pool of process {pid} (pipelines.testing)
if [ "$1" = -c ] && [ "$2" = {where_question} ]; then
  echo {where_answer}  # where pyflink-udf-runner.sh is, asked before each worker
  exit 0
elif [ "$1 $2" != "-m pyflink.fn_execution.beam.beam_boot" ]; then
  exec {python} "$@"  # anything else: the interpreter itself
fi
id="" provision="" semi=/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --id=*) id="${{1#--id=}}" ;;
    --provision_endpoint=*) provision="${{1#--provision_endpoint=}}" ;;
    --semi_persist_dir=*) semi="${{1#--semi_persist_dir=}}" ;;
  esac
  shift
done
exec 3<>/dev/tcp/127.0.0.1/{port} || exit 1
{{
  printf '%s\\0' "$(cat "$(dirname "$0")/token")" "$id" "$provision" "$semi"
  for name in $(compgen -e); do printf '%s=%s\\0' "$name" "${{!name}}"; done  # the environment
  printf '\\0'
}} >&3
read -r -u 3 status
exit "${{status:-1}}"
"""
_BOOT: dict[str, Any] = {}  # the script and the port of its listener, once started
# Flink 2.2's PythonEnvironmentManagerUtils asks the worker's interpreter where PyFlink's
# bin directory is, with this program, before each worker starts.
_PYFLINK_BIN_QUESTION = (
    "import pyflink;import os;"
    "print(os.path.join(os.path.abspath(os.path.dirname(pyflink.__file__)), 'bin'))"
)


def in_process_worker_boot() -> Path:
    """A `python.executable` for jobs whose Python workers run in this process's pool
    (`in_process_worker_pool`): the script above, and the loopback listener it talks to,
    started once. PyFlink 2.2: the pool's `StartWorker(request, context)`, which runs the
    worker until it ends."""
    if "script" in _BOOT:
        return Path(_BOOT["script"])
    import atexit
    import secrets
    import shlex
    import shutil
    import socket
    import sys
    import tempfile

    import pyflink

    in_process_worker_pool()
    listener = socket.create_server(("127.0.0.1", 0))
    token = secrets.token_hex(16)
    home = Path(tempfile.mkdtemp(prefix="pipelines-boot-"))  # 0700
    atexit.register(shutil.rmtree, home, True)
    (home / "token").write_text(token)
    script = home / "boot"
    script.write_text(
        _BOOT_SCRIPT.format(
            pid=os.getpid(),
            port=listener.getsockname()[1],
            python=shlex.quote(sys.executable),
            where_question=shlex.quote(_PYFLINK_BIN_QUESTION),
            where_answer=shlex.quote(
                os.path.join(os.path.abspath(os.path.dirname(pyflink.__file__)), "bin")
            ),
        )
    )
    script.chmod(0o700)
    threading.Thread(
        target=_serve_boots, args=(listener, token), name="pipelines-boot", daemon=True
    ).start()
    _BOOT.update(script=script, port=listener.getsockname()[1])
    return script


def _serve_boots(listener, token: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_boot_worker, args=(conn, token), daemon=True).start()


def _boot_worker(conn, token: str) -> None:
    """Start the worker one boot script asked for and answer its exit status (0: the worker
    ran and ended) when it ends; a connection without this process's token is closed."""
    import hmac

    from apache_beam.portability.api import beam_fn_api_pb2, endpoints_pb2
    from pyflink.fn_execution.beam.beam_worker_pool_service import (
        BeamFnLoopbackWorkerPoolServicer,
    )

    with conn:
        data = b""
        while not data.endswith(b"\0\0"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                return
            data += chunk
        given, worker_id, provision, semi, *entries = data[:-2].decode().split("\0")
        if not hmac.compare_digest(given, token):
            return
        params = dict(entry.partition("=")[::2] for entry in entries)
        params["SEMI_PERSISTENT_DIRECTORY"] = semi
        request = beam_fn_api_pb2.StartWorkerRequest(
            worker_id=worker_id,
            provision_endpoint=endpoints_pb2.ApiServiceDescriptor(url=provision),
            params=params,
        )
        response = BeamFnLoopbackWorkerPoolServicer().StartWorker(request, None)
        try:
            conn.sendall(b"1\n" if response.error else b"0\n")
        except OSError:  # the TaskManager ended the script first
            pass


def _get(j_future, timeout_s: float):
    """Wait on a Java CompletableFuture for at most `timeout_s` (raises on timeout)."""
    from pyflink.java_gateway import get_gateway

    unit = get_gateway().jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    return j_future.get(int(timeout_s * 1000), unit)


def cancel_job(client, timeout_s: float) -> None:
    """Cancel and wait, at most `timeout_s` (PyFlink's `cancel().result()` has no deadline)."""
    _get(java_job_client(client).cancel(), timeout_s)


def stop_with_savepoint(client, target: str, timeout_s: float) -> str:
    """Stop with a savepoint, at most `timeout_s`. PyFlink 2.2's JobClient.stop_with_savepoint
    calls a Java signature that no longer exists (it lacks the SavepointFormatType), so
    this calls the Java client directly."""
    from pyflink.java_gateway import get_gateway

    fmt = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL
    return str(_get(java_job_client(client).stopWithSavepoint(False, target, fmt), timeout_s))


def is_detached(result) -> bool:
    """Whether `env.execute` returned at submission (`flink run --detached`): Flink then
    hands back a DetachedJobExecutionResult, which has an id but no outcome."""
    return not result._j_job_execution_result.isJobExecutionResult()


def is_java_timeout(exc: BaseException) -> bool:
    return "java.util.concurrent.TimeoutException" in str(exc)


def set_record_deserializer(builder, j_deserializer) -> None:
    """Give a KafkaSource builder a Java KafkaRecordDeserializationSchema (PyFlink 2.2 only
    offers value-only deserializers; the builder's Java object is `_j_builder`)."""
    builder._j_builder.setDeserializer(j_deserializer)


def java_stream(stream):
    """The Java DataStream behind a PyFlink one (PyFlink 2.2: `_j_data_stream`), to insert
    the project's Java operators (jars/src) where PyFlink has no API for them."""
    return stream._j_data_stream


def python_stream(j_stream):
    from pyflink.datastream import DataStream

    return DataStream(j_stream)


def split_lines(stream, keep_marked: bool):
    """A batched Python stage's output back as records: each element split at newlines,
    keeping the lines that start (keep_marked) or do not start with U+0000, the mark
    stripped. pipelines.flink.SplitLines, run in the JVM."""
    from pyflink.common import Types
    from pyflink.java_gateway import get_gateway

    split = get_gateway().jvm.pipelines.flink.SplitLines(keep_marked)
    return python_stream(java_stream(stream).flatMap(split, Types.STRING().get_java_type_info()))


def set_transaction_naming(builder, name: str):
    """KafkaSinkBuilder.setTransactionNamingStrategy (connector 4.0+), which PyFlink 2.2's
    builder does not wrap; `name` is the Java enum constant (INCREMENTING, POOLING)."""
    from pyflink.java_gateway import get_gateway

    strategies = get_gateway().jvm.org.apache.flink.connector.kafka.sink.TransactionNamingStrategy
    builder._j_builder.setTransactionNamingStrategy(strategies.valueOf(name))
    return builder


def set_java_record_serializer(builder, j_serializer):
    """KafkaSinkBuilder.setRecordSerializer with a Java KafkaRecordSerializationSchema.
    PyFlink 2.2's set_record_serializer reads a `topicSelector` field that only the
    connector's own builder-made schema has, so this goes to the Java builder
    (`_j_builder`) directly."""
    builder._j_builder.setRecordSerializer(j_serializer)
    return builder


def window_counts_in_jvm(
    stream, j_watermark_strategy, key_field: str, time_field: str, size_ms: int, lateness_ms: int
):
    """Event time, key, tumbling window and count, all in the JVM (pipelines.flink:
    JsonFieldKey, CountPerWindow, LateRecord) over JSON records the parse stage accepted.
    Returns (the stream after event time, counts, late records wrapped with the reason).

    PyFlink would run a Python call per record for the key selector and the window function;
    neither needs Python."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    duration = jvm.java.time.Duration.ofMillis
    project = jvm.pipelines.flink
    timed = java_stream(stream).assignTimestampsAndWatermarks(j_watermark_strategy)
    string_type = jvm.org.apache.flink.api.common.typeinfo.Types.STRING
    late_tag = jvm.org.apache.flink.util.OutputTag("late-records", string_type)
    windows = jvm.org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows
    counts = (
        timed.keyBy(project.JsonFieldKey(key_field))
        .window(windows.of(duration(size_ms)))
        .allowedLateness(duration(lateness_ms))
        .sideOutputLateData(late_tag)
        .process(project.CountPerWindow())
    )
    late = counts.getSideOutput(late_tag).map(project.LateRecord(key_field, time_field))
    return python_stream(timed), python_stream(counts), python_stream(late)


# Metric names: Flink 2.2 names a source's operator metrics `Source__<name>.<metric>` and a
# sink writer's `<name>__Writer.<metric>`; the project's own gauges (parse, enrich) are
# `<operator name>.<gauge>`.
SOURCE_RECORDS_OUT = ("Source__", ".numRecordsOut")
SINK_RECORDS_SENT = ("__Writer.numRecordsSend",)
DEAD_LETTER_SINKS = ("dead-letter-sink__", "late-sink__")
PROJECT_GAUGES = (
    "lookups",
    "lookupFailures",
    "retries",
    "markedMissing",
    "deadLetters",
    "unexpectedErrors",
)


def metric_totals(get, base: str) -> dict[str, int]:
    """Totals over a vertex's subtasks, from its REST metrics `base` URL: `in` (records the
    sources emitted), `out` (records the main sinks sent; dead-letter and late sinks are
    counted by the gauges instead), and each project gauge by name."""
    names = [m["id"] for m in get(base)]
    wanted: dict[str, str] = {}
    for name in names:
        if name.startswith(SOURCE_RECORDS_OUT[0]) and name.endswith(SOURCE_RECORDS_OUT[1]):
            wanted[name] = "in"
        elif name.endswith(SINK_RECORDS_SENT[0]) and not name.startswith(DEAD_LETTER_SINKS):
            wanted[name] = "out"
        elif name.rpartition(".")[2] in PROJECT_GAUGES and "__" not in name:
            wanted[name] = name.rpartition(".")[2]
    totals: dict[str, int] = {}
    if wanted:
        for item in get(f"{base}?get={','.join(wanted)}&agg=sum"):
            key = wanted[item["id"]]
            totals[key] = totals.get(key, 0) + int(float(item.get("sum", 0)))
    return totals


def subtask_index(runtime_context) -> int:
    """This subtask's index from a Python function's runtime context, in either mode.

    PyFlink 2.2.1's thread-mode runtime context (fn_execution/datastream/embedded) calls the
    Java `RuntimeContext.getIndexOfThisSubtask`, which Flink 2.0 moved to `TaskInfo`: the
    call fails with AttributeError on the pemja object. Its `_runtime_context` is that Java
    context. tests/unit/test_flink_compat.py fails once PyFlink's own call works again.
    """
    try:
        return runtime_context.get_index_of_this_subtask()
    except AttributeError:
        return runtime_context._runtime_context.getTaskInfo().getIndexOfThisSubtask()


def is_thread_mode(runtime_context) -> bool:
    """Whether a Python function runs in thread mode (its runtime context is PyFlink's
    fn_execution.datastream.embedded one).

    What differs there for the project's stages: a gauge is a Python callable that Flink's
    metrics thread calls through pemja, and a call after the task's interpreter is gone
    kills the JVM (SIGSEGV in take_gil, seen at a job's end on 2.2.1). Stages count with
    counters in thread mode instead."""
    return ".embedded." in type(runtime_context).__module__


def row_fields(row):
    """A source Row's fields in either execution mode, to unpack by position.

    PyFlink 2.2.1's thread mode hands a Java Row to Python as a plain tuple, (its RowKind's
    ordinal, (the fields...)); process mode as a pyflink Row, which unpacks to its fields.
    Beam's rows (NamedTuple subclasses) and column_rows' tuples pass through as they are."""
    return row[1] if type(row) is tuple and len(row) == 2 else row


def column_rows(batch):
    """The source rows of a Java ColumnBatcher batch, each a plain tuple of its fields.

    Thread mode's batches: PyFlink 2.2.1 converts a list of Rows for Python with one
    reused array per row, so every element arrives as the last row; the ColumnBatcher
    sends one row of arrays instead, which are converted element by element."""
    return zip(*row_fields(batch))


def embedded_python_path(python: str | None = None) -> str:
    """`python.pythonpath` for thread mode: the import path of the interpreter `python`
    names (None: this one).

    Thread mode runs the Python stages in the JVM with pemja, which starts the libpython of
    the base interpreter, not the virtualenv's: its site-packages (pemja itself, PyFlink,
    this project through its editable install's .pth) are not on the path unless handed
    over. This interpreter's path is read; another's (a cluster's TaskManagers, say
    /opt/venv/bin/python) is the site-packages of the venv it sits in, at this
    interpreter's version (a job's pickled functions need the same one on both sides)."""
    import sys

    if python is None or python == sys.executable:
        return os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(PurePosixPath(python).parent.parent / "lib" / version / "site-packages")


class NoSharedLibpython(Exception):
    """Thread mode cannot start on this interpreter: the message says why and what to do."""


# What pemja runs with the configured python to find the library it loads into the JVM
# (read from pemja's CommonUtils in flink-python-2.2.1.jar).
_FIND_LIBPYTHON = "from find_libpython import find_libpython;print(find_libpython())"


def check_shared_libpython(python: str | None = None) -> None:
    """Raise NoSharedLibpython when thread mode's pemja would find no shared libpython for
    `python` (None: this interpreter). Without one, pemja's System.load fails and what
    surfaces, when the first task starts, is `NoSuchFieldException: loadedLibraryNames` from
    its fallback: nothing there says that the interpreter (a Debian python3.11 without
    libpython3.11, a Python built without --enable-shared) is the cause. An interpreter not
    on this machine (a cluster's) is the cluster's to have; it is not checked here."""
    import sys

    python = python or sys.executable
    if not os.path.exists(python):
        return
    # Asked of the interpreter itself, as pemja asks it (find_libpython is pemja's
    # dependency, not this project's to import).
    result = subprocess.run(
        [python, "-c", _FIND_LIBPYTHON], capture_output=True, text=True, timeout=60
    )
    found = result.stdout.strip() if result.returncode == 0 else ""
    if found in ("", "None"):
        raise NoSharedLibpython(
            f"python.execution_mode: thread runs the Python stages inside the JVM, which "
            f"needs the shared libpython of {python}, and it has none: install it (Debian/"
            f"Ubuntu: apt-get install libpython3.11) or use a Python built with "
            f"--enable-shared, or set python.execution_mode: process"
        )
