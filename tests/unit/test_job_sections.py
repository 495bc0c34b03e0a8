"""A job's own settings section: loaded through the project's layers, refused and
explained like the project's own keys, masked where printed, and carried into pickled
functions only as references that the worker resolves itself."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from pipelines.settings import (
    ConfigError,
    JobSection,
    SecretMask,
    effective_view,
    load_settings,
)
from pipelines.settings.secrets import without_secrets
from tests.unit.test_settings import BASE

pytestmark = pytest.mark.unit

TOKEN = "tok-3f9a-not-for-logs"


class Pricing(JobSection):
    section: ClassVar[str] = "pricing"
    table: Path
    api_token: str
    currency: str = "EUR"


class Other(JobSection):
    section: ClassVar[str] = "pricing"
    table: str = ""


def _conf(tmp_path: Path, own: str, **layers: str) -> Path:
    (tmp_path / "base").mkdir(parents=True)
    (tmp_path / "base" / "demo.yaml").write_text(textwrap.dedent(BASE) + textwrap.dedent(own))
    for name, text in layers.items():
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "demo.yaml").write_text(textwrap.dedent(text))
    return tmp_path


OWN = """
pricing:
  table: conf/prices.csv
  api_token: ${env:PRICING_TOKEN}
"""


@pytest.fixture(autouse=True)
def _token(monkeypatch):
    monkeypatch.setenv("PRICING_TOKEN", TOKEN)


def _load(conf: Path, *overrides: str, environ=None, sections=(Pricing,)):
    return load_settings(
        "demo", conf_dir=conf, overrides=list(overrides), environ=environ or {}, sections=sections
    )


def test_a_declared_section_is_validated_typed_and_layered(tmp_path):
    conf = _conf(tmp_path, OWN, prod="pricing: {currency: USD}\n")
    loaded = load_settings(
        "demo", env="prod", conf_dir=conf, overrides=["pricing.table=/data/p.csv"],
        environ={"PIPELINES__PRICING__CURRENCY": "CHF"}, sections=(Pricing,),
    )  # fmt: skip
    pricing = Pricing.of(loaded.settings)
    assert pricing == Pricing(table=Path("/data/p.csv"), api_token=TOKEN, currency="CHF")
    assert loaded.sources["pricing.table"] == "--set"
    assert loaded.sources["pricing.currency"] == "env PIPELINES__PRICING__CURRENCY"
    assert loaded.sources["pricing.api_token"].endswith("-> env PRICING_TOKEN")


def test_a_section_no_model_declares_is_refused_naming_the_jobs_sections_too(tmp_path):
    conf = _conf(tmp_path, OWN + "discounts: {rate: 3}\n")
    with pytest.raises(ConfigError) as err:
        _load(conf)
    line = str(err.value)
    assert line.startswith(f"{conf / 'base' / 'demo.yaml'}: discounts: unknown key; known keys")
    assert "pricing" in line.split("known keys here: ")[1].split(", ")
    with pytest.raises(ConfigError, match=r"demo.yaml: pricing: unknown key; known keys here: "):
        _load(_conf(tmp_path / "none", OWN), sections=())


def test_a_bad_key_of_the_section_names_the_file_the_key_and_what_is_known(tmp_path):
    conf = _conf(tmp_path, OWN + "  colour: red\n")
    with pytest.raises(ConfigError) as err:
        _load(conf)
    assert str(err.value) == (
        f"{conf / 'base' / 'demo.yaml'}: pricing.colour: unknown key; "
        "known keys here: api_token, currency, table"
    )
    with pytest.raises(ConfigError, match=r"^--set: pricing.currency: Input should be a valid"):
        _load(_conf(tmp_path / "t", OWN), "pricing.currency=[a, b]")
    with pytest.raises(ConfigError, match=r"demo.yaml: pricing: a section of keys, not str"):
        _load(_conf(tmp_path / "s", "pricing: cheap\n"))


def test_a_required_key_of_the_section_is_reported_missing(tmp_path):
    conf = _conf(tmp_path, "pricing: {table: t.csv}\n")
    with pytest.raises(ConfigError, match=r"pricing.api_token: required but not set"):
        _load(conf)


def test_a_secret_written_as_a_value_is_refused_without_showing_it(tmp_path):
    for where, conf, sets in (
        ("demo.yaml", _conf(tmp_path / "f", "pricing: {table: t, api_token: s3cr3t-v4lue}\n"), ()),
        ("--set", _conf(tmp_path / "c", "pricing: {table: t}\n"), ("pricing.api_token=s3cr3t-v4lue",)),
    ):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            _load(conf, *sets)
        assert where in str(err.value) and "pricing.api_token: a secret of a job's own" in str(
            err.value
        )
        assert "s3cr3t-v4lue" not in str(err.value)


def test_the_environment_layer_carries_a_secret_as_the_reference_to_its_variable(tmp_path):
    conf = _conf(tmp_path, "pricing: {table: t}\n")
    env = {"PIPELINES__PRICING__API_TOKEN": "from-the-env-layer"}
    loaded = _load(conf, environ=env)
    assert Pricing.of(loaded.settings).api_token == "from-the-env-layer"
    trees = loaded.settings._section_trees
    assert trees["pricing"]["api_token"] == "${env:PIPELINES__PRICING__API_TOKEN}"


def test_config_show_masks_the_sections_secret_and_names_every_source(tmp_path):
    loaded = _load(_conf(tmp_path, OWN))
    rows = {key: (value, source) for key, value, source in effective_view(loaded)}
    assert rows["pricing.api_token"][0] == "******"
    assert rows["pricing.api_token"][1].endswith("-> env PRICING_TOKEN")
    assert rows["pricing.table"] == ("conf/prices.csv", str(tmp_path / "base" / "demo.yaml"))
    assert rows["pricing.currency"] == ("EUR", "default")
    assert not [row for row in effective_view(loaded) if TOKEN in row[1]]
    assert SecretMask().learn(loaded.settings)(f"failed with {TOKEN}") == "failed with ******"


def test_a_pickled_function_carries_the_reference_and_the_worker_resolves_it(tmp_path, monkeypatch):
    loaded = _load(_conf(tmp_path, OWN))
    carried = pickle.dumps(without_secrets(loaded.settings))
    assert TOKEN.encode() not in carried
    assert b"${env:PRICING_TOKEN}" in carried
    monkeypatch.setenv("PRICING_TOKEN", "the-workers-own")  # the worker's environment
    on_worker = pickle.loads(carried)
    assert Pricing.of(on_worker).api_token == "the-workers-own"
    assert Pricing.of(on_worker).table == Path("conf/prices.csv")
    monkeypatch.delenv("PRICING_TOKEN")
    with pytest.raises(ConfigError, match=r"pricing.api_token: environment variable PRICING_TOKEN"):
        Pricing.of(pickle.loads(carried))


def test_a_model_the_job_did_not_declare_is_one_clear_error(tmp_path):
    class Unlisted(JobSection):
        section: ClassVar[str] = "unlisted"

    loaded = _load(_conf(tmp_path, OWN))
    with pytest.raises(ConfigError, match=r"^unlisted: no such section .* lists Unlisted in"):
        Unlisted.of(loaded.settings)


def test_a_section_may_not_take_a_projects_name_or_anothers(tmp_path):
    class Sink(JobSection):
        section: ClassVar[str] = "sink"

    conf = _conf(tmp_path, OWN)
    with pytest.raises(ConfigError, match=r"^sections: Sink names section 'sink', which the proj"):
        _load(conf, sections=(Sink,))
    with pytest.raises(ConfigError, match=r"^sections: Other names section 'pricing', which ano"):
        _load(conf, sections=(Pricing, Other))
    with pytest.raises(ConfigError, match=r"^sections: .* is not a JobSection"):
        _load(conf, sections=(dict,))  # type: ignore[arg-type]


def test_a_section_that_no_longer_validates_on_a_worker_names_its_key(tmp_path, monkeypatch):
    loaded = _load(_conf(tmp_path, OWN))
    carried = pickle.loads(pickle.dumps(without_secrets(loaded.settings)))
    carried._section_trees["pricing"] = {**carried._section_trees["pricing"], "currency": [1]}
    with pytest.raises(ConfigError, match=r"^pricing.currency: Input should be a valid string$"):
        Pricing.of(carried)
    assert carried._section_trees["pricing"]["api_token"] == "${env:PRICING_TOKEN}"  # kept
