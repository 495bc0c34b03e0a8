"""The CLI's printouts: provenance and masking, as a user sees them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.unit


def show(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "config", "show", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_config_show_masks_secrets_and_names_sources():
    secret = "hunter2-not-for-logs"
    proc = show(
        "enrich",
        "--set",
        "kafka.security.protocol=SASL_SSL",
        "--set",
        "kafka.security.sasl_mechanism=PLAIN",
        "--set",
        "kafka.security.username=svc",
        "--set",
        "kafka.properties.sasl.oauthbearer.client.secret=also-secret",
        env={"PIPELINES__KAFKA__SECURITY__PASSWORD": secret},
    )
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout and "also-secret" not in proc.stdout
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert rows["kafka.security.password"].split()[1] == "******"
    assert rows["kafka.security.password"].endswith("# env PIPELINES__KAFKA__SECURITY__PASSWORD")
    assert rows["kafka.properties.sasl.oauthbearer.client.secret"].split()[1] == "******"
    assert rows["checkpoint.interval"].split()[1] == "5s"
    assert rows["checkpoint.interval"].endswith("# conf/base/enrich.yaml")
    assert rows["kafka.security.username"].endswith("# --set")


def test_bad_config_is_one_error_and_exit_2():
    proc = show("enrich", "--set", "sink.delivery=twice")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: --set: sink.delivery: 'twice' is not allowed; "
        "allowed: exactly-once, at-least-once, none"
    )


SDK_ERROR = """java.lang.RuntimeException: Error received from SDK harness for instruction 4: Traceback (most recent call last):
  File "/x/apache_beam/runners/worker/sdk_worker.py", line 311, in _execute
    response = task()
  File "/x/pyflink/fn_execution/datastream/process/async_function/operation.py", line 394, in _raise_exception_if_exists
    raise self._exception
Exception: ('Error happens inside the class \\'<class \\'pipelines.lookups.enrichment.EnrichBatch\\'>\\' during handling input \\'[{"company": "secret-customer", "id": 2}]\\'', EnrichmentFailed('enrichment of record 2 failed: HTTP 503 from http://h/lookup/batch (3 attempts)'))

\tat org.apache.beam.runners.fnexecution.control.FnApiControlClient$ResponseStreamObserver.onNext(FnApiControlClient.java:181)
"""


def test_a_python_worker_error_is_its_exception_without_the_record():
    from pipelines.running.errors import explain_python_error

    line = explain_python_error(SDK_ERROR)
    assert line == (
        "EnrichmentFailed: enrichment of record 2 failed: HTTP 503 from "
        "http://h/lookup/batch (3 attempts)"
    )


def test_a_plain_python_traceback_gives_its_last_exception_line():
    from pipelines.running.errors import explain_python_error

    text = 'Traceback (most recent call last):\n  File "x", line 1\nValueError: bad thing\n'
    assert explain_python_error(text) == "ValueError: bad thing"
    # A class of a module reads as the wrapped form gives it: its own name.
    qualified = text.replace("ValueError", "pipelines.lookups.EnrichmentFailed")
    assert explain_python_error(qualified) == "EnrichmentFailed: bad thing"


def test_a_thread_mode_error_reads_as_the_process_mode_one():
    """Measured: a thread-mode enrich job under `on_failure: fail` ended with pemja's
    wrapper as its one line; process mode names the exception's class."""
    from pipelines.running.errors import last_cause

    text = (
        "org.apache.flink.runtime.JobException: Recovery is suppressed\n\tat x.y(Z.java:1)\n"
        "Caused by: pemja.core.PythonException: <class 'pipelines.lookups.EnrichmentFailed'>: "
        "enrichment of record 0 failed: HTTP 503 from http://127.0.0.1:1/lookup/batch "
        "(3 attempts)\n\tat pemja.core.PythonInterpreter.invokeMethod(Native Method)\n"
    )
    assert last_cause(text) == (
        "EnrichmentFailed: enrichment of record 0 failed: HTTP 503 from "
        "http://127.0.0.1:1/lookup/batch (3 attempts)"
    )
    assert last_cause("Caused by: java.io.IOException: gone\n") == "java.io.IOException: gone"


def test_no_shared_libpython_is_one_error_line_and_exit_2(capsys):
    """Raised before the job is submitted (flink.environment.create_environment): the
    command ends as a bad configuration does, not with a Py4J or pemja trace."""
    from pipelines.flink.libpython import NoSharedLibpython
    from pipelines.running.errors import EXIT_BAD_INPUT, guarded

    def action() -> int:
        raise NoSharedLibpython("python.execution_mode: thread ... has none")

    assert guarded(action) == EXIT_BAD_INPUT == 2
    assert capsys.readouterr().err == "error: python.execution_mode: thread ... has none\n"


def test_stop_signals_raise_once_then_force_and_the_watchdog_can_be_called_off():
    import os
    import signal
    import time

    from pipelines.running.processes import ProcessGroups
    from pipelines.running.stopping import StopRequested, StopSignals

    forced = []
    stops = StopSignals(ProcessGroups(), deadline_s=0.5)
    stops._force = lambda message, code: forced.append((message, code))
    stops.install()
    try:
        with pytest.raises(StopRequested):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert stops.requested == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # the second signal forces, it does not raise
        time.sleep(0.1)
        assert forced == [("SIGINT again: exiting now", 130)]
    finally:
        stops.restore()
    time.sleep(1)  # past the watchdog's deadline: restored, so it never fires
    assert len(forced) == 1


def test_our_stop_caught_and_logged_by_a_library_prints_no_stack_trace():
    """Py4J's send_command logs a KeyboardInterrupt on the root logger with its trace, then
    raises it on: our stop, arriving inside a Py4J call, would print that trace."""
    import logging
    import os
    import signal
    import time

    from pipelines.running.processes import ProcessGroups
    from pipelines.running.stopping import StopRequested, StopSignals

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    def library_call():  # what py4j 0.10.9's GatewayClient.send_command does
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            logging.exception("KeyboardInterrupt while sending command.")
            raise

    keep = Keep()
    logging.getLogger().addHandler(keep)
    stops = StopSignals(ProcessGroups(), deadline_s=30)
    stops.install()
    try:
        with pytest.raises(StopRequested):
            library_call()
        try:
            raise ValueError("not a stop")
        except ValueError:
            logging.exception("another failure")
    finally:
        stops.restore()
        logging.getLogger().removeHandler(keep)
    assert [r.getMessage() for r in records] == ["another failure"]


def test_a_thread_dying_after_a_local_run_writes_to_the_worker_log_not_the_terminal(
    tmp_path, capfd
):
    import threading

    from pipelines.running.worker_output import thread_errors_to

    log = tmp_path / "worker.log"
    previous = threading.excepthook
    threading.excepthook = thread_errors_to(log)
    try:

        def dies():
            raise ConnectionError("Multiplexer hanging up")

        thread = threading.Thread(target=dies, name="read_grpc_client_inputs")
        thread.start()
        thread.join()
    finally:
        threading.excepthook = previous
    assert capfd.readouterr().err == ""
    text = log.read_text()
    assert text.startswith("Exception in thread read_grpc_client_inputs:\nTraceback")
    assert text.rstrip().endswith("ConnectionError: Multiplexer hanging up")
