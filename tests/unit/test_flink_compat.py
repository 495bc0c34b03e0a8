"""Each private PyFlink/Flink API that pipelines/flink/compat.py reaches, checked against the
pinned wheel: an upgrade that moves one fails here, not in a running job."""

from __future__ import annotations

import importlib.metadata
import struct
import subprocess
import textwrap
from pathlib import Path

import pytest

from pipelines.flink import FLINK_VERSION, libpython, rows, streams
from tests.support import run_python

pytestmark = pytest.mark.unit


def test_written_for_the_pinned_wheel():
    assert importlib.metadata.version("apache-flink") == FLINK_VERSION


@pytest.fixture(scope="module", autouse=True)
def env(flink_env):
    return flink_env


def _java_class(name: str):
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    return jvm.java.lang.Class.forName(name, True, loader)


def test_the_python_names_it_patches_or_reads_exist():
    import pyflink.datastream.connectors.kafka as kafka
    import pyflink.java_gateway as java_gateway
    import pyflink.pyflink_gateway_server as gateway_server
    from py4j.java_gateway import GatewayClient

    assert callable(java_gateway.launch_gateway_server_process)
    assert gateway_server.Popen is subprocess.Popen
    assert hasattr(java_gateway, "_gateway")
    assert "is_connected" in GatewayClient.__init__.__code__.co_names
    builder = kafka.KafkaSource.builder()
    assert hasattr(builder, "_j_builder")
    from pyflink.fn_execution.beam.beam_worker_pool_service import (
        BeamFnLoopbackWorkerPoolServicer,
    )

    assert callable(BeamFnLoopbackWorkerPoolServicer.StartWorker)
    # in_process_worker_boot stands in for `$python` in the runner's one boot line
    runner = Path(kafka.__file__).parents[2] / "bin" / "pyflink-udf-runner.sh"
    assert "${python} -m pyflink.fn_execution.beam.beam_boot $@" in runner.read_text()


def test_the_java_members_it_calls_exist():
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    mini = _java_class("org.apache.flink.runtime.minicluster.MiniClusterJobClient")
    assert mini.getDeclaredField("miniCluster") is not None
    client = _java_class("org.apache.flink.core.execution.JobClient")
    names = {m.getName() for m in client.getMethods()}
    assert {"cancel", "stopWithSavepoint"} <= names
    stop = [m for m in client.getMethods() if m.getName() == "stopWithSavepoint"][0]
    assert [t.getName() for t in stop.getParameterTypes()] == [
        "boolean",
        "java.lang.String",
        "org.apache.flink.core.execution.SavepointFormatType",
    ]
    assert jvm.org.apache.flink.core.execution.SavepointFormatType.CANONICAL is not None
    builder = _java_class("org.apache.flink.runtime.minicluster.MiniClusterConfiguration$Builder")
    assert {"setConfiguration", "setNumTaskManagers", "setNumSlotsPerTaskManager"} <= {
        m.getName() for m in builder.getMethods()
    }
    cluster = _java_class("org.apache.flink.runtime.minicluster.MiniCluster")
    assert {"start", "getRestAddress", "close"} <= {m.getName() for m in cluster.getMethods()}
    result = _java_class("org.apache.flink.api.common.JobExecutionResult")
    assert "isJobExecutionResult" in {m.getName() for m in result.getMethods()}


def test_project_java_operators_load_and_split_lines_is_typed(env):
    from pyflink.common import Types

    for name in (
        "SplitLines",
        "RecordBatcher",
        "OriginRecordDeserializer",
        "RawRecordSerializer",
        "RecordSerializer",
    ):
        assert _java_class(f"pipelines.flink.{name}") is not None
    stream = env.from_collection(["\x00dead", "alive"], type_info=Types.STRING())
    kept = streams.split_lines(stream, keep_marked=True)
    assert streams.java_stream(kept).getType().toString() == "String"


def _split(batch: str, keep_marked: bool) -> list[str]:
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    out = jvm.java.util.ArrayList()
    jvm.pipelines.flink.SplitLines(keep_marked).flatMap(
        batch, jvm.org.apache.flink.api.common.functions.util.ListCollector(out)
    )
    return list(out)


def test_split_lines_routes_marked_lines_and_strips_the_mark(env):
    batch = '{"id":1}\n\x00{"error":"x"}\n{"id":2}\n\n\x00{"error":"y"}'
    assert _split(batch, keep_marked=False) == ['{"id":1}', '{"id":2}']
    assert _split(batch, keep_marked=True) == ['{"error":"x"}', '{"error":"y"}']
    assert _split('{"only":1}', keep_marked=False) == ['{"only":1}']
    assert _split("", keep_marked=False) == []


def _java_row(*fields):
    from pyflink.java_gateway import get_gateway

    gateway = get_gateway()
    array = gateway.new_array(gateway.jvm.java.lang.Object, len(fields))
    for i, field in enumerate(fields):
        array[i] = field
    return gateway.jvm.org.apache.flink.types.Row.of(array)


def header_bytes(headers: list[tuple[str, bytes | None]]) -> bytearray:
    """The encoding jars/src HeaderBytes reads (4-byte lengths, -1 for a null value)."""
    out = bytearray()
    for key, value in headers:
        out += struct.pack(">i", len(key.encode())) + key.encode()
        out += struct.pack(">i", -1 if value is None else len(value)) + (value or b"")
    return out


def _headers(record) -> list[tuple[str, bytes | None]]:
    return [
        (h.key(), None if h.value() is None else bytes(h.value()))
        for h in record.headers().toArray()
    ]


HEADERS = [("trace", b"\x00\xff"), ("trace", b"again"), ("empty", b""), ("none", None)]


def test_raw_record_serializer_writes_key_value_headers_and_timestamp_unchanged(env):
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    key, value = bytearray(b"k\xff"), bytearray(b"\x00\xfe not utf-8")
    serializer = jvm.pipelines.flink.RawRecordSerializer("out")
    record = serializer.serialize(
        _java_row("in", 2, 7, 1_700_000_000_123, key, value, header_bytes(HEADERS)), None, None
    )
    assert (record.topic(), bytes(record.key()), bytes(record.value()), record.timestamp()) == (
        "out",
        b"k\xff",
        b"\x00\xfe not utf-8",
        1_700_000_000_123,
    )
    assert _headers(record) == HEADERS  # order, repeats, empty and null values kept
    assert record.partition() is None
    tombstone = serializer.serialize(_java_row("in", 0, 1, 5, None, None, None), None, None)
    assert tombstone.key() is None and tombstone.value() is None
    assert _headers(tombstone) == []


def test_record_serializer_writes_the_carried_key_headers_and_timestamp(env):
    from pyflink.java_gateway import get_gateway

    from pipelines.records.lines import with_meta

    jvm = get_gateway().jvm
    line = with_meta(b"k\xff", bytes(header_bytes(HEADERS)), 1_700_000_000_123, '{"id":1,"c":"x"}')
    carried = jvm.pipelines.flink.RecordSerializer("out", None, True, True).serialize(
        line, None, 99
    )
    assert (bytes(carried.key()), bytes(carried.value()), carried.timestamp()) == (
        b"k\xff",
        b'{"id":1,"c":"x"}',
        1_700_000_000_123,
    )
    assert _headers(carried) == HEADERS
    keyed = jvm.pipelines.flink.RecordSerializer("out", "c", False, False).serialize(line, None, 99)
    assert (bytes(keyed.key()), keyed.timestamp(), _headers(keyed)) == (b"x", 99, [])
    no_key = with_meta(None, None, None, '{"id":2}')
    plain = jvm.pipelines.flink.RecordSerializer("out", None, True, True)
    for text in (no_key, '{"id":2}'):  # no metadata carried, or none to carry
        record = plain.serialize(text, None, 99)
        assert (record.key(), bytes(record.value()), record.timestamp()) == (None, b'{"id":2}', 99)


def test_gateway_starts_in_a_group_the_owner_ends():
    """In a fresh interpreter: the JVM is in its own group, owned, and gone after end()."""
    script = textwrap.dedent("""
        import os
        from pipelines.flink.gateway import disconnect_gateway, gateway_in_group
        from pipelines.running.processes import ProcessGroups, command_line, group_alive
        owner = ProcessGroups()
        with gateway_in_group(owner):
            from pyflink.java_gateway import get_gateway
            tmp = get_gateway().jvm.java.lang.System.getProperty("java.io.tmpdir")
        [group] = owner.groups
        assert group != os.getpgid(0)
        assert any("java" in command_line(p) for p in owner.members())
        [scratch] = owner.scratch
        assert str(scratch) == tmp, (scratch, tmp)  # the JVM's temp files are the owner's
        disconnect_gateway()
        owner.end()
        assert not group_alive(group)
        assert not scratch.exists()
        print("ok")
    """)
    proc = run_python(script, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"
    assert proc.stderr.strip() == ""


def test_the_testing_cluster_thread_imports_nothing_there():
    """pipelines.testing starts the gateway and its mini-cluster on a thread while the
    caller imports the worker pool (Beam): a module imported on both threads at once can
    be handed over half made. In a fresh interpreter, with the launch's own imports done
    first, that thread imports no module."""
    script = textwrap.dedent("""
        import sys, threading
        from pipelines import testing
        from pipelines.flink.gateway import (
            disconnect_gateway, gateway_in_group, imports_of_a_launch,
        )
        from pipelines.running.processes import ProcessGroups
        owner = ProcessGroups()
        try:
            with gateway_in_group(owner):
                imports_of_a_launch()
                before = set(sys.modules)
                thread = threading.Thread(target=testing._shared_cluster)
                thread.start()
                thread.join(120)
                print(sorted(set(sys.modules) - before))
        finally:
            disconnect_gateway()
            owner.end()
    """)
    proc = run_python(script, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_the_row_python_reads_is_the_row_java_produces():
    """kafka.origin_type_info() declares what OriginRecordDeserializer emits; they must agree
    field for field, or every record would be misread."""
    from pyflink.java_gateway import get_gateway

    from pipelines.kafka.connectors import origin_type_info

    produced = get_gateway().jvm.pipelines.flink.OriginRecordDeserializer().getProducedType()
    assert produced.toString() == origin_type_info().get_java_type_info().toString()


def test_quiet_environment_logs_written_by_many_at_once_is_whole_and_quiet_once(tmp_path):
    """Two local runs start at once (two test workers): each sees the config missing, and
    neither may read the other's half-written file (it appended the lines to a fragment)."""
    from concurrent.futures import ThreadPoolExecutor

    from pipelines.flink.gateway import QUIET_ENVIRONMENT_LOGS, quiet_environment_logs

    start = tmp_path / "wheel.properties"
    start.write_text("".join(f"logger.l{i}.name = a.b.C{i}\n" for i in range(3000)))
    for attempt in range(20):
        path = tmp_path / f"log4j-{attempt}.properties"
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _: quiet_environment_logs(path, start), range(8)))
        assert path.read_text() == start.read_text() + QUIET_ENVIRONMENT_LOGS
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def _thread_mode_job(env, function) -> list[str]:
    """Java Rows (the Kafka source's shape) through each of the project's batchers
    (RecordBatcher's lists, ColumnBatcher's columns) into a Python function run in thread
    mode; what the function saw, one line per element."""
    from pyflink.common import Configuration, Types
    from pyflink.java_gateway import get_gateway

    gateway = get_gateway()
    rows = gateway.jvm.java.util.ArrayList()
    big = 10_000_000_000  # py4j makes a Java Long of an int only past 32 bits
    for i in range(3):
        rows.add(_java_row("in", 0, big + i, big + i, None, f'{{"id":{i}}}'.encode(), None))
    from pipelines.kafka.connectors import origin_type_info

    j_type = origin_type_info().get_java_type_info()
    source = env._j_stream_execution_environment.fromData(rows, j_type)
    batchers = gateway.jvm.pipelines.flink
    lists = source.transform(
        "lists", batchers.RecordBatcher.outputType(j_type), batchers.RecordBatcher(10, 1000)
    )
    columns = source.transform(
        "columns", batchers.ColumnBatcher.outputType(), batchers.ColumnBatcher(10, 1000)
    )
    thread = Configuration()
    thread.set_string("python.execution-mode", "thread")
    thread.set_string("python.pythonpath", libpython.embedded_python_path())
    env.configure(thread)
    try:
        seen = [
            streams.python_stream(batched).process(function, output_type=Types.STRING())
            for batched in (lists, columns)
        ]
        with seen[0].union(seen[1]).execute_and_collect() as results:
            return sorted(results)
    finally:
        process = Configuration()
        process.set_string("python.execution-mode", "process")
        env.configure(process)


def test_thread_mode_still_needs_the_subtask_and_row_workarounds(env):
    """Fails when PyFlink mends them: then subtask_index and row_fields can go, and the
    parse stage can take RecordBatcher's lists in thread mode (pipelines.stages.parse)."""
    from pyflink.datastream.functions import ProcessFunction

    class Report(ProcessFunction):
        def open(self, runtime_context):
            try:
                self.own = str(runtime_context.get_index_of_this_subtask())
            except AttributeError as exc:
                self.own = f"AttributeError: {exc}"
            self.ours = f"{rows.subtask_index(runtime_context)}"
            self.ours += f" thread={rows.is_thread_mode(runtime_context)}"

        def process_element(self, value, ctx):
            if isinstance(value, list):
                kind, batch = type(value[0]).__name__, value
                seen = [rows.row_fields(row) for row in batch]
            else:
                kind, seen = "columns", list(rows.column_rows(value))
            fields = [(f[0], f[2], f[5]) for f in seen]
            yield f"{self.own} | {self.ours} | {kind} | {fields}"

    columns, lists = _thread_mode_job(env, Report())
    own, ours, kind, fields = lists.split(" | ")
    # PyFlink's own call reaches a method Flink 2.0 removed
    assert (
        own == "AttributeError: 'pemja.PyJObject' object has no attribute 'getIndexOfThisSubtask'"
    )
    assert ours == "0 thread=True"
    assert kind == "tuple"  # (row kind, fields), not a Row
    # a list of rows arrives as the last row three times (one reused array per row)
    last = "('in', 10000000002, b'{\"id\":2}')"
    assert fields == f"[{last}, {last}, {last}]"
    # the same rows as columns arrive whole
    assert columns.split(" | ")[2:] == [
        "columns",
        str([("in", 10_000_000_000 + i, f'{{"id":{i}}}'.encode()) for i in range(3)]),
    ]


def test_thread_mode_hands_pemja_the_import_path_of_the_interpreter_that_runs_the_job():
    """Locally this venv's path; on a cluster (the topology's and the deploy image's
    /opt/venv/bin/python) the site-packages of the venv that interpreter is in."""
    import os
    import sys

    here = libpython.embedded_python_path().split(os.pathsep)
    assert here and all(Path(p).is_dir() for p in here)
    assert libpython.embedded_python_path(sys.executable) == os.pathsep.join(here)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert libpython.embedded_python_path("/opt/venv/bin/python") == (
        f"/opt/venv/lib/{version}/site-packages"
    )


def test_the_libpython_check_runs_what_pemja_runs():
    """pemja finds the libpython it loads by running this script with the configured python;
    the check asks the same question. Fails when pemja asks another way."""
    import zipfile

    import pyflink

    jar = next((Path(pyflink.__file__).parent / "opt").glob("flink-python-*.jar"))
    with zipfile.ZipFile(jar) as archive:
        code = archive.read("pemja/utils/CommonUtils.class")
    assert libpython._FIND_LIBPYTHON.encode() in code


def test_thread_mode_on_a_python_pemja_finds_no_libpython_for_is_one_line(tmp_path):
    """This interpreter has its shared libpython; a venv without find_libpython (what pemja
    runs to find it) is one where thread mode cannot start. Another machine's interpreter
    is not judged here."""
    import sys

    libpython.check_shared_libpython()
    libpython.check_shared_libpython(sys.executable)
    libpython.check_shared_libpython("/opt/no-such-venv/bin/python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", tmp_path / "bare"], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    with pytest.raises(libpython.NoSharedLibpython) as raised:
        libpython.check_shared_libpython(bare)
    assert str(raised.value) == (
        f"python.execution_mode: thread runs the Python stages inside the JVM, which needs the "
        f"shared libpython of {bare}, and it has none: install it (Debian/Ubuntu: apt-get "
        f"install libpython3.11) or use a Python built with --enable-shared, or set "
        f"python.execution_mode: process"
    )
