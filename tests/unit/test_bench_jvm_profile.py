"""bench.jvm_profile's arithmetic: threads of one kind add up, JFR samples are counted by
thread, self frame and inclusive frame, and each count is weighted by the CPU of the
threads that ran Java."""

from __future__ import annotations

import os
import threading
import time

import pytest

from bench.jvm_profile import Samples, ThreadCpu, per_record_us, report, thread_group

pytestmark = pytest.mark.unit


def test_threads_of_one_kind_are_one_group():
    assert thread_group("GC Thread#1") == "GC Thread"
    assert thread_group("C2 CompilerThre") == "C2 CompilerThre"
    assert thread_group("kafka-producer-") == "kafka-producer"
    assert (
        thread_group("flink-pekko.actor.default-dispatcher-7")
        == "flink-pekko.actor.default-dispatcher"
    )


def test_thread_cpu_sees_the_thread_that_burned_it():
    """A named thread of this process that burns 0.3 s of CPU is counted under its name
    (read while it still runs: a thread that has ended is gone from /proc)."""
    import ctypes

    libc = ctypes.CDLL(None)
    burned, finish = threading.Event(), threading.Event()

    def burn():
        libc.pthread_setname_np(libc.pthread_self(), b"burner-7")
        started = time.thread_time()
        while time.thread_time() - started < 0.3:
            pass
        burned.set()
        finish.wait(60)

    libc.pthread_self.restype = ctypes.c_ulong
    libc.pthread_setname_np.argtypes = [ctypes.c_ulong, ctypes.c_char_p]
    meter = ThreadCpu(os.getpid())
    meter.start()
    worker = threading.Thread(target=burn)
    worker.start()
    try:
        assert burned.wait(60)
        used = meter.stop()
    finally:
        finish.set()
        worker.join()
    assert 0.25 <= used.get("burner", 0.0) < 1.0, used


def test_samples_are_weighted_by_the_cpu_of_the_threads_that_ran_java():
    samples = Samples()
    for _ in range(3):
        samples.add("Source: kafka-source -> Sink (1/1)#0", ["a.Emit", "b.Poll", "c.Run"])
    samples.add("kafka-producer-network-thread | sink", ["d.Send", "c.Run"])
    # /proc's names are 15 characters; the compiler's thread ran no Java
    threads = {"Source: kafka-s": 3.0, "kafka-producer": 1.0, "C2 CompilerThre": 4.0}
    lines = report(threads, samples, window_s=10.0, rate=100_000.0)
    text = "\n".join(lines)
    assert lines[0] == "JVM threads by CPU: 0.80 cores, 8.00 us/record"
    assert "    4.00  50.0%  C2 CompilerThre" in text
    # 4 CPU seconds of Java threads over 4 samples: 1 us/record a sample
    assert "      3.00  75.0%  a.Emit" in text
    assert "      4.00 100.0%  c.Run" in text
    assert "      1.00  25.0%  kafka-producer-network-thread | sink" in text


def test_per_record_is_cpu_over_the_window_at_the_rate():
    assert per_record_us(2.0, 10.0, 100_000.0) == pytest.approx(2.0)
    assert per_record_us(2.0, 10.0, 0.0) == 0.0
