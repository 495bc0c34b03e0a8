"""The gateway JVM's class archive: which option a gateway command gets, that the name
follows the JDK and the class path, and that a gateway started here maps the archive
`pipelines jars` builds."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from pipelines.flink import class_archive
from pipelines.flink.class_archive import DUMP_ENV, OFF_ENV, archive_path, with_class_archive
from tests.support import run_python

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _archives_in(tmp_path, monkeypatch, request):
    if request.node.name.startswith("test_a_gateway_started_here"):
        return  # the real one
    monkeypatch.setattr(class_archive, "archive_dir", lambda: tmp_path / "archives")
    (tmp_path / "archives").mkdir()


def _command(tmp_path: Path) -> list[str]:
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    for jar in jars:
        jar.write_bytes(b"jar")
    return ["java", "-Xmx1g", "-cp", os.pathsep.join(map(str, jars)), "Main", "local"]


def test_an_archive_that_exists_is_used_and_none_is_asked_for_otherwise(tmp_path):
    command = _command(tmp_path)
    path = archive_path(command)
    assert with_class_archive(command, {}) == command
    path.write_bytes(b"archive")
    assert with_class_archive(command, {}) == [
        "java", f"-XX:SharedArchiveFile={path}", *command[1:]
    ]  # fmt: skip
    assert with_class_archive(command, {OFF_ENV: "0"}) == command


def test_the_builder_asks_the_jvm_to_write_the_archive_where_it_says(tmp_path):
    command = _command(tmp_path)
    name = archive_path(command).name
    assert with_class_archive(command, {DUMP_ENV: "/build"}) == [
        "java", f"-XX:ArchiveClassesAtExit=/build/{name}", *command[1:]
    ]  # fmt: skip


def test_the_archive_is_named_for_the_class_path_it_was_made_with(tmp_path):
    command = _command(tmp_path)
    before = archive_path(command)
    assert archive_path(list(command)) == before
    (tmp_path / "b.jar").write_bytes(b"another build of the jar")
    assert archive_path(command) != before
    assert archive_path([*command[:3], command[3] + os.pathsep + "/x.jar", *command[4:]]) != before
    assert with_class_archive(["java", "-version"], {}) == ["java", "-version"]


def test_a_gateway_started_here_maps_the_archive_pipelines_jars_builds():
    """In a fresh interpreter, as a local run starts it: the JVM has the archive built for
    its own command mapped into its memory, and said nothing about it."""
    from pipelines.warm_start import ensure_class_archive

    path = ensure_class_archive()
    assert path is not None and path.is_file()
    script = textwrap.dedent(f"""
        import psutil
        from pipelines.flink.gateway import GATEWAY_STDERR, disconnect_gateway, gateway_in_group
        from pipelines.running.processes import ProcessGroups, command_line
        owner = ProcessGroups()
        try:
            with gateway_in_group(owner):
                from pyflink.java_gateway import get_gateway
                get_gateway().jvm.java.lang.System.getProperty("java.version")
            [jvm] = [p for p in owner.members() if "java" in command_line(p)]
            mapped = {{m.path for m in psutil.Process(jvm).memory_maps()}}
            print({str(path)!r} in mapped, [l for l in GATEWAY_STDERR.lines if "cds" in l])
        finally:
            disconnect_gateway()
            owner.end()
    """)
    proc = run_python(script, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True []"
