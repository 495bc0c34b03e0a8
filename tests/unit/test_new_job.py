"""`pipelines-dev new`: names checked, nothing written on error, the new job owns its names."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.lookups.http_demo import DemoService
from pipelines.settings import ConfigError, load_settings
from pipelines_dev.scaffolding import PLACEHOLDER, SCAFFOLD, new_job, with_section_example

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path):
    for rel in ("pipelines/jobs", "conf/base", "tests/integration", "tests/unit"):
        (tmp_path / rel).mkdir(parents=True)
    shutil.copytree(ROOT / SCAFFOLD, tmp_path / SCAFFOLD)
    for job in ("enrich", "windowed", "passthrough"):
        shutil.copy(ROOT / "pipelines" / "jobs" / f"{job}.py", tmp_path / "pipelines" / "jobs")
        shutil.copy(ROOT / "conf" / "base" / f"{job}.yaml", tmp_path / "conf" / "base")
    return tmp_path


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["1orders", "Orders", "my-job", "class", "orders job", ""])
def test_bad_names_write_nothing(project, name):
    before = files(project)
    with pytest.raises(ConfigError) as err:
        new_job(name, "enrich", project)
    assert str(err.value).startswith(
        f"job name {name!r} is not allowed: use a lowercase Python identifier"
    )
    assert files(project) == before


def test_existing_job_writes_nothing(project):
    before = files(project)
    with pytest.raises(ConfigError) as err:
        new_job("windowed", "enrich", project)
    assert str(err.value) == (
        "job 'windowed' exists already (pipelines/jobs/windowed.py, "
        "conf/base/windowed.yaml); nothing was written"
    )
    assert files(project) == before


@pytest.mark.parametrize("template", ["enrich", "windowed"])
def test_new_job_owns_its_topics_group_and_prefix(project, template):
    created = new_job("orders", template, project)
    conf = yaml.safe_load(created.config.read_text())
    assert conf["job"]["name"] == "orders"
    assert conf["source"] == {**conf["source"], "topics": ["orders-in"], "group_id": "orders"}
    assert conf["sink"]["topic"] == "orders-out"
    assert conf["sink"]["transactional_id_prefix"] == "orders"
    assert conf["sink"]["dead_letter_topic"] == "orders-dead-letters"
    # A job's name is its module's: the copy is the template's source, unchanged but for
    # the commented example of a job's own settings above its first function.
    source = (project / "pipelines" / "jobs" / f"{template}.py").read_text()
    example = (project / SCAFFOLD / "section_example.py").read_text()
    assert created.module.read_text() == with_section_example(
        source, example.replace(PLACEHOLDER, "orders")
    )
    assert created.module.read_text().replace(commented_example(), "") == source
    compile(created.module.read_text(), str(created.module), "exec")
    compile(created.test.read_text(), str(created.test), "exec")
    # Both tests: a scaffold file with only the job's name changed.
    assert created.logic_test == project / "tests" / "unit" / "test_job_orders_logic.py"
    for made, file in ((created.logic_test, "logic"), (created.test, "smoke")):
        scaffold = (project / SCAFFOLD / f"{file}_{template}.py").read_text()
        assert PLACEHOLDER in scaffold
        assert made.read_text() == scaffold.replace(PLACEHOLDER, "orders")
    assert 'JOB = "orders"' in created.logic_test.read_text()


def test_a_new_job_holds_few_lookups_in_flight_until_its_service_is_measured(project):
    created = new_job("orders", "enrich", project)
    text = created.config.read_text()
    conf = yaml.safe_load(text)["enrichment"]
    template = yaml.safe_load((project / "conf" / "base" / "enrich.yaml").read_text())
    assert (template["enrichment"]["capacity"], template["enrichment"]["max_capacity"]) == (
        8000, 64000,
    )  # fmt: skip
    assert conf["capacity"] == 32 and "max_capacity" not in conf
    assert "# A small fixed bound against a service nobody has measured yet" in text
    # ...and it loads: a fixed bound of 32, batches no larger than it.
    sections = (DemoService,)  # the demo client's, which the copy keeps
    loaded = load_settings(
        "orders", conf_dir=project / "conf", environ={}, sections=sections
    ).settings.enrichment
    assert (loaded.capacity, loaded.max_capacity, loaded.effective_batch_size()) == (32, None, 32)


def test_a_job_with_lookups_gets_tests_of_its_own_client(project):
    created = new_job("orders", "enrich", project)
    assert created.client_test == project / "tests" / "unit" / "test_job_orders_client.py"
    scaffold = (project / SCAFFOLD / "client_enrich.py").read_text()
    assert created.client_test.read_text() == scaffold.replace(PLACEHOLDER, "orders")
    assert "from pipelines.jobs.orders import lookup_client" in created.client_test.read_text()
    for template in ("passthrough", "windowed"):
        assert new_job(f"{template}_copy", template, project).client_test is None


def commented_example() -> str:
    example = (ROOT / SCAFFOLD / "section_example.py").read_text().replace(PLACEHOLDER, "orders")
    return with_section_example("\ndef f(): pass\n", example).split("\ndef f")[0][1:] + "\n"


def uncommented(text: str, first: str) -> str:
    """`text` with the commented block that starts at the line `first` uncommented."""
    lines, out, inside = text.splitlines(keepends=True), [], False
    for line in lines:
        inside = inside or line.startswith(first)
        if inside and not line.startswith("#"):
            inside = False
        out.append(line[2:] if inside and line.startswith("# ") else
                   line[1:] if inside and line == "#\n" else line)  # fmt: skip
    return "".join(out)


def test_the_commented_example_of_a_jobs_own_settings_works_once_uncommented(project, monkeypatch):
    import types

    from pipelines.settings import load_settings

    created = new_job("orders", "enrich", project)
    module = types.ModuleType("pipelines.jobs.orders")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # as an import would
    source = uncommented(created.module.read_text(), "# from pathlib import Path")
    # What the example's comment asks for: the section declared with the job's others.
    declared = "\njob = Job(build, sections=(DemoService,))\n"
    assert source.count(declared) == 1
    source = source.replace(declared, "\njob = Job(build, sections=(DemoService, Pricing))\n")
    exec(source, module.__dict__)
    created.config.write_text(uncommented(created.config.read_text(), "# pricing:"))
    monkeypatch.setenv("PRICING_TOKEN", "t0ken-from-env")
    assert module.job.sections == (module.DemoService, module.Pricing)
    loaded = load_settings(
        "orders", conf_dir=project / "conf", environ={}, sections=module.job.sections
    )
    pricing = module.Pricing.of(loaded.settings)
    assert (str(pricing.table), pricing.api_token) == ("conf/prices.csv", "t0ken-from-env")


def test_cli_error_is_one_line(project):
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines_dev.commands", "new", "Bad-Name", "--root", str(project)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: job name 'Bad-Name' is not allowed: use a lowercase Python identifier (letters, "
        "digits, underscores; starting with a letter), e.g. orders_enrich"
    ]


def test_a_jobs_name_is_its_modules_also_as_main(monkeypatch):
    import types

    from pipelines.running.job import Job

    for module_name, spec_name in (
        ("pipelines.jobs.orders", "pipelines.jobs.orders"),
        ("__main__", "pipelines.jobs.orders"),
    ):
        module = types.ModuleType(module_name)
        module.__spec__ = types.SimpleNamespace(name=spec_name)
        exec("def build(env, settings): pass", module.__dict__)
        monkeypatch.setitem(sys.modules, module_name, module)
        assert Job(module.build).name == "orders"


def test_every_job_is_discovered_and_copyable(project):
    from pipelines.running import registry

    assert registry.names() == ["enrich", "passthrough", "windowed"]
    assert registry.names(project / "pipelines" / "jobs") == registry.names()
    created = new_job("copy_of_copy", "passthrough", project)
    assert "def test_copy_of_copy_copies_every_record_once" in created.test.read_text()
    assert "def test_every_record_is_copied_as_it_is" in created.logic_test.read_text()
    again = new_job("third", "copy_of_copy", project)
    assert again.module.read_bytes() == created.module.read_bytes()


def test_unknown_template_lists_the_jobs(project):
    with pytest.raises(ConfigError) as err:
        new_job("orders", "nope", project)
    assert str(err.value) == "--from 'nope' is not a job; allowed: enrich, passthrough, windowed"


def test_a_beam_job_is_copied_with_its_own_config_and_smoke_test(project):
    (project / "pipelines" / "beam").mkdir()
    for module in ("enrich", "run", "transforms"):
        shutil.copy(ROOT / "pipelines" / "beam" / f"{module}.py", project / "pipelines" / "beam")
    created = new_job("orders", "beam-enrich", project)
    assert created.module == project / "pipelines" / "beam" / "orders.py"
    assert created.module.read_bytes() == (ROOT / "pipelines" / "beam" / "enrich.py").read_bytes()
    assert yaml.safe_load(created.config.read_text())["source"]["topics"] == ["orders-in"]
    assert created.test.name == "test_beam_job_orders.py"
    assert created.logic_test is None  # Beam's own TestPipeline covers its transforms
    scaffold = (ROOT / SCAFFOLD / "smoke_beam.py").read_text()
    assert created.test.read_text() == scaffold.replace(PLACEHOLDER, "orders")
    assert '"orders",' in created.test.read_text()
    compile(created.test.read_text(), str(created.test), "exec")
    with pytest.raises(ConfigError) as err:
        new_job("other", "beam-runner", project)
    assert str(err.value).endswith(
        "allowed: enrich, passthrough, windowed, beam-enrich, beam-orders"
    )
