"""The project's shape, checked: the runtime (pipelines) never imports the developer tooling
(pipelines_dev), the package root is a dozen groups by concern, no two modules share a
name, a package ships only what a cluster runs and no path of the machine that built it,
and the jobs are one registry."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pipelines.running import registry
from pipelines.settings import load_settings
from pipelines.shipping.packaging import package_job

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

# The package root: what a team that copies the template sees first. One folder per
# concern, and the three modules a job's author meets (stages, testing, the CLI).
PACKAGE_ROOT = {
    "__init__.py": "the public API, listed",
    "cli.py": "`pipelines`: the job commands",
    "api.py": "what a job imports, from one place",
    "stages.py": "the named stages a job is built from",
    "testing.py": "a job's build over records from a list",
    "warm_start.py": "the gateway JVM's class archive, built by running each job once",
    "beam": "the enrich job as a Beam pipeline",
    "flink": "settings -> the Flink environment; PyFlink's private API; the JobManager",
    "host": "this machine and checkout: paths, loopback listeners, the pinned jars",
    "jobs": "the jobs, one module each",
    "kafka": "settings -> KafkaSource/KafkaSink; clients; offsets; preflight",
    "lookups": "the enrichment client contract and the async stage",
    "records": "the line format, JSON, parsing with dead letters",
    "running": "loading, running, stopping, errors, the processes a run owns",
    "settings": "typed settings by concern, layers, secrets, a job's own sections",
    "shipping": "the package a cluster runs",
}


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_package_root_is_a_dozen_groups_by_concern():
    found = {
        p.name
        for p in (ROOT / "pipelines").iterdir()
        if p.name != "__pycache__" and (p.suffix == ".py" or (p / "__init__.py").is_file())
    }
    assert found == set(PACKAGE_ROOT)


def test_no_two_modules_share_a_name():
    """Except a job and the same job as a Beam pipeline: both registries name a module
    after its job (`pipelines run enrich`, `pipelines beam run enrich`)."""
    seen: dict[str, list[str]] = {}
    for top in ("pipelines", "pipelines_dev", "bench"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name != "__init__.py":
                seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    shared = {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}
    assert shared == {"enrich": ["pipelines/beam/enrich.py", "pipelines/jobs/enrich.py"]}


def test_the_installed_commands_are_the_runtimes_and_the_developers():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {
        "pipelines": "pipelines.cli:main",
        "pipelines-dev": "pipelines_dev.commands:main",
    }


def test_the_parser_sees_every_import_form(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import pipelines_dev.demo\nfrom pipelines_dev import topics\n"
        "def f():\n    from pipelines_dev.ports import free_ports\n"
    )
    assert {
        "pipelines_dev.demo",
        "pipelines_dev.topics",
        "pipelines_dev.ports",
    } <= imported_modules(probe)


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """lint-imports over `root` (its pyproject.toml's contracts), its packages first on the path."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_import_contracts_hold():
    """The layers of docs/layout.md, bench > pipelines_dev > pipelines, Beam apart from the
    Flink runner, no cycles (pyproject.toml, [tool.importlinter])."""
    checked = lint_imports(ROOT)
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert "4 kept, 0 broken" in checked.stdout


@pytest.mark.parametrize(
    "module, adds, broken",
    [
        ("pipelines/host/paths.py", "from pipelines import cli", "the runtime's layers"),
        ("pipelines/settings/values.py", "import pipelines_dev.demo", "the benchmarks use"),
        ("pipelines/beam/java.py", "import pipelines.running.runner", "the Beam pipeline"),
        ("pipelines/records/lines.py", "import pipelines.records.parse", "no cycles"),
    ],
)
def test_an_import_against_a_contract_breaks_it(tmp_path, module, adds, broken):
    for top in ("pipelines", "pipelines_dev", "bench"):
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / module, "a") as f:
        f.write(f"\n{adds}  # noqa\n")
    checked = lint_imports(tmp_path)
    assert checked.returncode == 1
    assert re.search(rf"^{re.escape(broken)}.* BROKEN$", checked.stdout, re.M), checked.stdout


def function_level_imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, import) of each import of `package` inside a function, with no `# lazy:`
    reason in the comment lines right above it (its import block's)."""
    text = path.read_text()
    lines = text.split("\n")
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(node):
            names = (
                [sub.module or ""]
                if isinstance(sub, ast.ImportFrom)
                else [a.name for a in sub.names]
                if isinstance(sub, ast.Import)
                else []
            )
            if not any(n == package or n.startswith(f"{package}.") for n in names):
                continue
            above = sub.lineno - 2
            while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
                above -= 1
            if not (above >= 0 and lines[above].strip().startswith("# lazy:")):
                found.append((sub.lineno, ast.unparse(sub)))
    return found


def test_the_projects_own_modules_are_imported_at_the_top():
    """An import inside a function hides a module's dependencies (and can hide a cycle);
    the few that must wait say why (`# lazy: ...`)."""
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "pipelines").rglob("*.py"))
        if (found := function_level_imports(path, "pipelines"))
    }
    assert offenders == {}


def test_the_import_check_sees_an_unmarked_import_and_accepts_a_marked_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n    from pipelines import jars\n\n"
        "def g():\n    # lazy: a reason\n    import pipelines.beam\n    from pipelines import x\n"
    )
    assert function_level_imports(probe, "pipelines") == [(2, "from pipelines import jars")]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    loaded = load_settings("windowed", environ={})
    out = tmp_path_factory.mktemp("pkg") / "windowed"
    return package_job(loaded, out, python="/opt/venv/bin/python", flink="flink")


def test_a_package_ships_only_what_a_cluster_runs(package):
    shipped = {str(p.relative_to(package.root)) for p in (package.root / "pipelines").rglob("*.py")}
    assert not any(p.startswith("pipelines/beam/") for p in shipped)
    assert not (package.root / "pipelines_dev").exists()
    assert {p for p in shipped if p.startswith("pipelines/jobs/")} == {
        "pipelines/jobs/__init__.py",
        "pipelines/jobs/windowed.py",
    }
    assert {
        "pipelines/running/runner.py",
        "pipelines/stages.py",
        "pipelines/settings/loader.py",
        "pipelines/lookups/__init__.py",
    } <= shipped
    assert not (package.root / "bench").exists()


def test_every_module_a_package_ships_imports_there(package):
    """As a cluster's Python imports them: from the package alone (no Beam, no devtools)."""
    shipped = sorted(
        ".".join(p.relative_to(package.root).with_suffix("").parts).removesuffix(".__init__")
        for p in (package.root / "pipelines").rglob("*.py")
    )
    # This venv installs the project editable: its finder would serve whatever the package
    # lacks from the working tree. A cluster's venv has no such finder.
    script = (
        "import importlib, sys\n"
        "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in f.__module__]\n"
        f"for name in {shipped!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sys.modules['pipelines'].__file__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=package.root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(package.root / "pipelines" / "__init__.py")


def test_a_packaged_config_holds_no_path_of_the_building_machine(package):
    text = (package.root / "conf" / "base" / "windowed.yaml").read_text()
    assert str(ROOT) not in text
    assert "storage: null" in text and "savepoints: null" in text


def test_checkpoint_storage_is_resolved_where_the_job_runs(tmp_path):
    from pipelines.flink.environment import checkpoint_dir, savepoint_dir
    from pipelines.host import paths

    settings = load_settings(
        "enrich", sections=registry.load("enrich").sections, environ={}
    ).settings
    assert checkpoint_dir(settings) == f"file://{paths.LOCAL_DIR}/checkpoints/enrich"
    assert savepoint_dir(settings) == f"file://{paths.LOCAL_DIR}/savepoints/enrich"
    custom = load_settings(
        "enrich",
        environ={},
        overrides=[f"checkpoint.storage={tmp_path}/cp/{{job}}"],
        sections=registry.load("enrich").sections,
    ).settings
    assert checkpoint_dir(custom) == f"file://{tmp_path}/cp/enrich"


def test_the_job_command_names_exactly_the_developer_commands():
    """`pipelines` cannot import the tooling, so it names the developer commands it points
    at `pipelines-dev`; this keeps that list the tooling's own."""
    from pipelines.cli import DEVELOPER_COMMANDS, HANDLERS
    from pipelines_dev import commands

    assert set(DEVELOPER_COMMANDS) == set(commands.HANDLERS)
    assert not set(DEVELOPER_COMMANDS) & set(HANDLERS)
