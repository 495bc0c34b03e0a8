"""`pipelines-dev new`: a job copied under a new name, with its config and two tests.

`new` writes four files (job module, base config, a fast pipelines.testing test, a Kafka
smoke test) or none: every check runs before the first write. The tests come from real
files in pipelines_dev/scaffold (formatted and linted like the code); only the job's
name changes in them, and in the config only the names a job must own.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from pathlib import Path

import yaml

import pipelines.beam as beam_package
from pipelines.beam import names as beam_names
from pipelines.host.paths import PROJECT_ROOT
from pipelines.running.registry import NAME, names
from pipelines.settings import ConfigError


@dataclass(frozen=True)
class NewJob:
    module: Path
    config: Path
    test: Path
    logic_test: Path | None = None  # pipelines.testing, no Kafka (Flink jobs)
    client_test: Path | None = None  # the job's own lookup client (jobs with lookups)

    @property
    def files(self) -> list[Path]:
        found = (self.module, self.config, self.logic_test, self.client_test, self.test)
        return [p for p in found if p]


def _config_for(name: str, source: dict) -> dict:
    """The template's config with every name a job must own replaced by the new job's."""
    conf = yaml.safe_load(yaml.safe_dump(source))
    conf["job"]["name"] = name
    conf["source"]["topics"] = [f"{name}-in"]
    conf["source"]["group_id"] = name
    conf["sink"]["topic"] = f"{name}-out"
    conf["sink"]["transactional_id_prefix"] = name
    if conf["sink"].get("dead_letter_topic"):
        conf["sink"]["dead_letter_topic"] = f"{name}-dead-letters"
    if conf.get("window", {}).get("late_topic"):
        conf["window"]["late_topic"] = f"{name}-late"
    if "enrichment" in conf:  # the demo's sizing is its service's, not an unknown one's
        conf["enrichment"]["capacity"] = NEW_JOB_CAPACITY
        conf["enrichment"].pop("max_capacity", None)
    return conf


# Lookups in flight per subtask for a new job's service, which nobody has measured yet.
NEW_JOB_CAPACITY = 32
CAPACITY_COMMENT = f"""\
  # A small fixed bound against a service nobody has measured yet: at most this many
  # lookups in flight per subtask. Size it from your service's latency and the rate you
  # need (about 2 x rate x latency; docs/performance.md, "Sizing a job"; `make profile`
  # shows where a run's time goes), and add max_capacity to let the bound grow.
  capacity: {NEW_JOB_CAPACITY}
"""


def _config_text(name: str, source_name: str, base_conf: dict) -> str:
    """The new job's YAML: a header saying what it owns, the template's keys with the
    names it must own, and the enrichment bound explained."""
    body = yaml.safe_dump(_config_for(name, base_conf), sort_keys=False)
    body = body.replace(f"  capacity: {NEW_JOB_CAPACITY}\n", CAPACITY_COMMENT, 1)
    return (
        f"# {name}: created from conf/base/{source_name}.yaml by `pipelines-dev new`. It owns its\n"
        f"# topics, group id and transactional id prefix; change them together.\n" + body
    )


SCAFFOLD = Path("pipelines_dev", "scaffold")  # under the project root
PLACEHOLDER = "TEMPLATE_JOB"  # the job's name in every scaffold file


def _smoke_test_kind(module_text: str, conf: dict) -> str:
    """Which generated test fits a job: windows are counted, lookups need the demo
    service, and a plain copy is checked record for record."""
    if conf.get("window"):
        return "windowed"
    if "stages.enrich(" in module_text or "stages.parse_and_enrich(" in module_text:
        return "enrich"
    return "copy"


def new_job(name: str, template: str = "enrich", root: Path = PROJECT_ROOT) -> NewJob:
    """Copy job `template` (any job in `root`'s pipelines/jobs) as `name`: the module as it
    is (a job's name is its module's, so nothing in it changes), its config with the names
    the new job must own, and a smoke test."""
    # pipelines.beam.<name> becomes an attribute of the package when imported: a Beam job
    # called `run` or `java` would replace the module of that name, and break every command.
    host = beam_package
    taken = {n for n in vars(host) if NAME.fullmatch(n)} - set(names()) - set(beam_names())
    if template.startswith("beam-") and name in taken:
        raise ConfigError(
            f"job name {name!r} is not allowed: it would replace {host.__name__}.{name}, "
            f"which the project uses; choose another, e.g. {name}_job"
        )
    if keyword.iskeyword(name) or not NAME.fullmatch(name):
        raise ConfigError(
            f"job name {name!r} is not allowed: use a lowercase Python identifier "
            f"(letters, digits, underscores; starting with a letter), e.g. orders_enrich"
        )
    beam = template.startswith("beam-")
    templates = names(root / "pipelines" / "jobs") + [
        f"beam-{n}" for n in beam_names(root / "pipelines" / "beam")
    ]
    if template not in templates:
        raise ConfigError(f"--from {template!r} is not a job; allowed: {', '.join(templates)}")
    source_name = template.removeprefix("beam-")
    package = root / "pipelines" / ("beam" if beam else "jobs")
    module = (package / f"{source_name}.py").read_text()
    base_conf = yaml.safe_load((root / "conf" / "base" / f"{source_name}.yaml").read_text())
    kind = "beam" if beam else _smoke_test_kind(module, base_conf)
    unit = root / "tests" / "unit"
    target = NewJob(
        module=package / f"{name}.py",
        config=root / "conf" / "base" / f"{name}.yaml",
        test=root / "tests" / "integration" / f"test_{'beam_' if beam else ''}job_{name}.py",
        logic_test=None if beam else unit / f"test_job_{name}_logic.py",
        client_test=unit / f"test_job_{name}_client.py" if kind == "enrich" else None,
    )
    existing = [str(p.relative_to(root)) for p in target.files if p.exists()]
    if existing:
        raise ConfigError(
            f"job {name!r} exists already ({', '.join(existing)}); nothing was written"
        )
    _write(target, _contents(root, name, source_name, module, base_conf, kind))
    return target


def _contents(root: Path, name: str, source_name: str, module: str, conf: dict, kind: str):
    """What each of a new job's files holds, by NewJob field."""
    beam = kind == "beam"
    return {
        "module": module
        if beam
        else with_section_example(module, _scaffold(root, "section_example.py", name)),
        "config": _config_text(name, source_name, conf) + ("" if beam else SECTION_EXAMPLE_YAML),
        "test": _scaffold(root, f"smoke_{kind}.py", name),
        "logic_test": None if beam else _scaffold(root, f"logic_{kind}.py", name),
        "client_test": _scaffold(root, "client_enrich.py", name) if kind == "enrich" else None,
    }


def _write(target: NewJob, contents: dict) -> None:
    """Every file read and every check made: now the writes."""
    for field, text in contents.items():
        path = getattr(target, field)
        if path is not None and text is not None:
            path.write_text(text)


SECTION_MARKER = "# --- example ---\n"
SECTION_EXAMPLE_YAML = """
# This job's own settings: a section its module declares (see the commented Pricing model
# in its module, and docs/configuration.md). A secret is a reference, never its value.
# pricing:
#   table: conf/prices.csv
#   api_token: ${env:PRICING_TOKEN}
"""


def with_section_example(module: str, example: str) -> str:
    """`module` with the scaffold's example of a job's own settings, commented out, above
    its first top-level function (the module is otherwise the template's, unchanged)."""
    block = example.split(SECTION_MARKER, 1)[1]
    commented = "".join(
        "#\n" if not line.strip() else line if line.startswith("#") else f"# {line}"
        for line in block.splitlines(keepends=True)
    )
    if commented.splitlines()[0] in module:  # a copy of a copy has it already
        return module
    at = module.find("\ndef ")
    if at < 0:
        return module + "\n\n" + commented
    return module[: at + 1] + commented + "\n\n" + module[at + 1 :]


def _scaffold(root: Path, file: str, name: str) -> str:
    """A scaffold file for job `name`: its placeholder replaced, nothing else."""
    return (root / SCAFFOLD / file).read_text().replace(PLACEHOLDER, name)
