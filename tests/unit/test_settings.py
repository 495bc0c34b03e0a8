"""Settings: layering, provenance, and errors that name the file, the key and what is allowed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pipelines.lookups.http_demo import DemoService
from pipelines.settings import (
    ConfigError,
    SecretMask,
    effective_view,
    load_settings,
    parse_duration_ms,
)

pytestmark = pytest.mark.unit

BASE = """
job: {name: demo}
source:
  topics: [in]
  group_id: g
sink:
  topic: out
  transactional_id_prefix: demo
"""


def _conf(tmp_path: Path, base: str = BASE, **layers: str) -> Path:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "demo.yaml").write_text(textwrap.dedent(base))
    for name, text in layers.items():
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "demo.yaml").write_text(textwrap.dedent(text))
    return tmp_path


def test_layers_apply_in_order_and_remember_their_source(tmp_path):
    conf = _conf(
        tmp_path,
        dev="checkpoint: {interval: 30s}\njob: {parallelism: 2}\n",
        local="job: {parallelism: 3}\n",
    )
    loaded = load_settings(
        "demo",
        env="dev",
        conf_dir=conf,
        environ={"PIPELINES__CHECKPOINT__TIMEOUT": "5min"},
        overrides=["source.group_id=cli-group"],
    )
    s = loaded.settings
    assert s.checkpoint.interval == 30_000
    assert s.job.parallelism == 3
    assert s.checkpoint.timeout == 300_000
    assert s.source.group_id == "cli-group"
    assert loaded.sources["checkpoint.interval"].endswith("dev/demo.yaml")
    assert loaded.sources["job.parallelism"].endswith("local/demo.yaml")
    assert loaded.sources["checkpoint.timeout"] == "env PIPELINES__CHECKPOINT__TIMEOUT"
    assert loaded.sources["source.group_id"] == "--set"


def test_unknown_key_names_file_key_and_known_keys(tmp_path):
    conf = _conf(tmp_path, BASE + "checkpoint: {intervall: 5s}\n")
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    message = str(err.value)
    assert "base/demo.yaml: checkpoint.intervall: unknown key" in message
    assert "interval" in message and "min_pause" in message


def test_bad_enum_lists_allowed_values(tmp_path):
    conf = _conf(tmp_path, BASE.replace("group_id: g", "group_id: g\n  start: {mode: earlist}"))
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    assert str(err.value) == (
        f"{conf / 'base' / 'demo.yaml'}: source.start.mode: 'earlist' is not allowed; "
        "allowed: group-offsets, earliest, latest, specific-offsets, timestamp"
    )


def test_wrong_type_from_set_names_the_command_line(tmp_path):
    conf = _conf(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={}, overrides=["job.parallelism=many"])
    assert str(err.value).startswith("--set: job.parallelism: ")


def test_malformed_yaml_names_file_and_line(tmp_path):
    conf = _conf(tmp_path, BASE + "sink: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    assert "base/demo.yaml: line" in str(err.value) and "not valid YAML" in str(err.value)


def test_bad_duration_is_explained(tmp_path):
    conf = _conf(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={}, overrides=["checkpoint.interval=soon"])
    assert "--set: checkpoint.interval: 'soon' is not a duration" in str(err.value)


@pytest.mark.parametrize("operator", ["sync", "async"])
def test_a_per_record_operator_is_not_one_of_the_projects(tmp_path, operator):
    # A lookup per record is what make bench-operators compares against
    # (bench/enrich_per_record.py), not a way the project runs a job.
    conf = _conf(tmp_path, BASE + f"enrichment: {{operator: {operator}}}\n")
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    assert str(err.value) == (
        f"{conf / 'base' / 'demo.yaml'}: enrichment.operator: {operator!r} is not allowed; "
        "allowed: batched, flowing"
    )


def test_a_max_capacity_below_capacity_is_refused_naming_both(tmp_path):
    conf = _conf(tmp_path, BASE + "enrichment: {capacity: 8000, max_capacity: 4000}\n")
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    assert str(err.value) == (
        f"{conf / 'base' / 'demo.yaml'}: enrichment: max_capacity (4000) is below capacity "
        "(8000): the in-flight bound adapts from capacity up to max_capacity"
    )


def test_a_capacity_set_above_the_growth_bound_is_the_most_in_flight(tmp_path):
    grows = BASE + "enrichment: {capacity: 8000, max_capacity: 64000}\n"
    conf = _conf(tmp_path, grows, prod="enrichment: {capacity: 500}\n")

    def bounds(env=None, environ=None, *sets):
        loaded = load_settings(
            "demo", env=env, conf_dir=conf, environ=environ or {}, overrides=sets
        )
        cfg = loaded.settings.enrichment
        return cfg.capacity, cfg.max_capacity, loaded.sources["enrichment.max_capacity"]

    base = str(conf / "base" / "demo.yaml")
    assert bounds() == (8000, 64000, base)  # the YAML asks for growth
    assert bounds(None, None, "enrichment.capacity=20") == (
        20,
        None,
        "--set (capacity set without max_capacity)",
    )
    assert bounds(None, None, "enrichment.capacity=20", "enrichment.max_capacity=40") == (
        20,
        40,
        "--set",
    )
    assert bounds(None, {"PIPELINES__ENRICHMENT__CAPACITY": "30"})[:2] == (30, None)
    prod = str(conf / "prod" / "demo.yaml")
    assert bounds("prod") == (500, None, f"{prod} (capacity set without max_capacity)")


def test_missing_job_config_lists_known_jobs(tmp_path):
    conf = _conf(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_settings("nope", conf_dir=conf, environ={})
    assert "no such job config; jobs with a config: demo" in str(err.value)


@pytest.mark.parametrize(
    "text,ms", [("500ms", 500), ("10s", 10_000), ("5min", 300_000), ("1h", 3_600_000), (250, 250)]
)
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


def test_timestamp_start_accepts_iso_and_epoch(tmp_path):
    conf = _conf(tmp_path)
    iso = load_settings(
        "demo",
        conf_dir=conf,
        environ={},
        overrides=["source.start.mode=timestamp", "source.start.timestamp=2024-01-01T00:00:00Z"],
    ).settings
    epoch = load_settings(
        "demo",
        conf_dir=conf,
        environ={},
        overrides=["source.start.mode=timestamp", "source.start.timestamp=1704067200000"],
    ).settings
    assert iso.source.start.timestamp == epoch.source.start.timestamp == 1_704_067_200_000


def test_specific_offsets_need_entries(tmp_path):
    conf = _conf(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_settings(
            "demo", conf_dir=conf, environ={}, overrides=["source.start.mode=specific-offsets"]
        )
    assert "source.start: mode specific-offsets needs at least one entry in offsets" in str(
        err.value
    )


def test_secret_from_env_is_resolved_and_masked(tmp_path):
    conf = _conf(
        tmp_path,
        BASE
        + textwrap.dedent("""
        kafka:
          security:
            protocol: SASL_SSL
            sasl_mechanism: SCRAM-SHA-512
            username: svc
            password: ${env:TEST_KAFKA_PASSWORD}
        """),
    )
    loaded = load_settings("demo", conf_dir=conf, environ={}, overrides=[])
    # environ={} only disables PIPELINES__ vars; the secret reference reads os.environ
    assert loaded.settings.kafka.security.password is not None
    view = {k: (v, src) for k, v, src in effective_view(loaded)}
    assert view["kafka.security.password"][0] == "******"
    assert "env TEST_KAFKA_PASSWORD" in view["kafka.security.password"][1]
    assert "s3cr3t-value" not in repr(loaded.settings)


@pytest.fixture(autouse=True)
def _secret_env(monkeypatch):
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", "s3cr3t-value")


def test_secret_reference_to_unset_env_names_it(tmp_path, monkeypatch):
    monkeypatch.delenv("TEST_KAFKA_PASSWORD")
    conf = _conf(
        tmp_path,
        BASE + "kafka: {security: {protocol: SASL_SSL, sasl_mechanism: PLAIN, "
        "username: u, password: '${env:TEST_KAFKA_PASSWORD}'}}\n",
    )
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    assert "kafka.security.password: environment variable TEST_KAFKA_PASSWORD is not set" in str(
        err.value
    )


def test_error_lines_mask_secrets_of_loaded_configs(tmp_path, capsys):
    from pipelines.running.errors import guarded
    from pipelines.settings import SecretMask

    conf = _conf(
        tmp_path,
        BASE + "kafka: {security: {protocol: SASL_SSL, sasl_mechanism: PLAIN, "
        "username: u, password: '${env:TEST_KAFKA_PASSWORD}'}}\n",
    )
    mask = SecretMask().learn(load_settings("demo", conf_dir=conf, environ={}).settings)

    def fails() -> int:
        raise ConfigError("login failed with password s3cr3t-value for user u")

    assert guarded(fails) == 2  # no config learned: nothing to mask, and no global state
    assert "s3cr3t-value" in capsys.readouterr().err
    assert guarded(fails, mask) == 2
    assert capsys.readouterr().err.strip() == "error: login failed with password ****** for user u"


@pytest.mark.parametrize("how", ["--set", "env"])
def test_a_secret_from_the_command_line_or_env_is_text_never_yaml(tmp_path, how):
    conf = _conf(
        tmp_path,
        BASE + "kafka: {security: {protocol: SASL_SSL, sasl_mechanism: PLAIN, username: u}}\n",
    )
    for value in ("12345678", "0123", "[a, b]", "null", "true"):
        if how == "--set":
            loaded = load_settings(
                "demo", conf_dir=conf, environ={}, overrides=[f"kafka.security.password={value}"]
            )
        else:
            loaded = load_settings(
                "demo", conf_dir=conf, environ={"PIPELINES__KAFKA__SECURITY__PASSWORD": value}
            )
        assert loaded.settings.kafka.security.password.get_secret_value() == value


def test_a_secret_of_the_wrong_type_is_reported_without_its_value(tmp_path):
    conf = _conf(
        tmp_path,
        BASE + "kafka: {security: {protocol: SASL_SSL, sasl_mechanism: PLAIN, "
        "username: u, password: 98765432}}\n",
    )
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    message = str(err.value)
    assert "98765432" not in message
    assert message == (
        "base/demo.yaml: kafka.security.password: Input should be a valid string "
        "(value not shown: it is a secret; quote it in YAML)"
    ).replace("base/demo.yaml", str(conf / "base" / "demo.yaml"))


def test_a_secret_file_that_is_not_text_is_one_config_error(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\xff\xfe\x00")
    conf = _conf(
        tmp_path,
        BASE + "kafka: {security: {protocol: SASL_SSL, sasl_mechanism: PLAIN, "
        f"username: u, password: '${{file:{secret}}}'}}}}\n",
    )
    with pytest.raises(ConfigError) as err:
        load_settings("demo", conf_dir=conf, environ={})
    assert str(err.value).endswith(
        f"kafka.security.password: secret file {secret} is not UTF-8 "
        f"text (byte 0); write the secret as text"
    )


SECRET_PROPERTIES = {
    # kafka.properties: inline private key, its passphrase, registry user info, OAuth
    "kafka.properties.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----canary-inline-key",
    "source.properties.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----canary-source-key",
    "kafka.properties.private.key.passphrase": "canary-passphrase",
    "kafka.properties.basic.auth.user.info": "user:canary-user-info",
    "kafka.librdkafka_properties.ssl.key.pem": "-----BEGIN PRIVATE KEY-----canary-pem",
    "kafka.librdkafka_properties.sasl.oauthbearer.config": "clientSecret=canary-oauth",
}


def _loaded_with(tmp_path, *overrides: str):
    """BASE with `--set` overrides, and no PIPELINES__ environment; the demo job's section
    declared."""
    return load_settings(
        "demo",
        conf_dir=_conf(tmp_path, BASE),
        environ={},
        overrides=overrides,
        sections=(DemoService,),
    )


def test_secret_keys_by_pattern_are_masked_where_printed(tmp_path):
    loaded = _loaded_with(
        tmp_path,
        *(f"{k}={v}" for k, v in SECRET_PROPERTIES.items()),
        "parse.required_fields.key=string",
    )
    view = {k: v for k, v, _src in effective_view(loaded)}
    for key in SECRET_PROPERTIES:
        assert view[key] == "******", key
    assert view["parse.required_fields.key"] == "string"  # a record field, no secret
    mask = SecretMask().learn(loaded.settings)
    for value in SECRET_PROPERTIES.values():
        assert mask(f"failed with {value}!") == "failed with ******!"


def test_a_value_from_a_reference_is_a_secret_whatever_its_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_GROUP", "canary-group-from-env")
    secret_file = tmp_path / "client-id"
    secret_file.write_text("canary-client-id-from-file\n")
    loaded = _loaded_with(
        tmp_path,
        "source.group_id=${env:TEST_GROUP}",
        f"kafka.properties.client.id=${{file:{secret_file}}}",
    )
    assert loaded.settings.source.group_id == "canary-group-from-env"
    view = {k: (v, src) for k, v, src in effective_view(loaded)}
    assert view["source.group_id"] == ("******", "--set -> env TEST_GROUP")
    assert view["kafka.properties.client.id"][0] == "******"
    mask = SecretMask().learn(loaded.settings)
    assert mask("group canary-group-from-env, client canary-client-id-from-file") == (
        "group ******, client ******"
    )


def test_a_password_in_a_url_is_masked_in_every_printout(tmp_path):
    loaded = _loaded_with(
        tmp_path, "demo_service.url=http://svc:canary-url-pass@enrich.example:8765/x"
    )
    view = {k: v for k, v, _src in effective_view(loaded)}
    assert view["demo_service.url"] == "http://svc:******@enrich.example:8765/x"
    mask = SecretMask().learn(loaded.settings)
    assert "canary-url-pass" not in mask("GET http://svc:canary-url-pass@enrich.example:8765/x")


def test_the_settings_python_functions_carry_hold_no_kafka_secret(tmp_path, monkeypatch):
    """A pickled SecretStr holds its value in clear: the settings themselves would carry
    every credential into the job graph."""
    import pickle

    from pipelines.settings.secrets import without_secrets

    monkeypatch.setenv("TEST_TRUST", "canary-trust")
    loaded = _loaded_with(
        tmp_path,
        "kafka.security.protocol=SASL_SSL",
        "kafka.security.sasl_mechanism=PLAIN",
        "kafka.security.username=u",
        "kafka.security.password=canary-sasl",
        "kafka.security.ssl_truststore_location=/x/trust.pem",
        "kafka.security.ssl_truststore_password=${env:TEST_TRUST}",
        "kafka.librdkafka_properties.sasl.oauthbearer.config=canary-oauth",
        "kafka.properties.client.id=${env:TEST_TRUST}",
        "demo_service.url=http://svc:8765",
    )
    canaries = (b"canary-sasl", b"canary-trust", b"canary-oauth")
    whole = pickle.dumps(loaded.settings)
    assert all(c in whole for c in canaries)  # what the functions carried before
    bare = without_secrets(loaded.settings)
    carried = pickle.dumps(bare)
    assert [c for c in canaries if c in carried] == []
    assert DemoService.of(bare).url == "http://svc:8765" and bare.sink == loaded.settings.sink
    assert loaded.settings.kafka.security.password.get_secret_value() == "canary-sasl"


@pytest.mark.parametrize(
    "key,value,source,shown",
    [
        ("kafka.security.password", None, "", "null"),
        ("kafka.security.password", "", "", ""),
        ("kafka.security.password", "hunter22", "", "******"),
        ("source.group_id", "from-env", "--set -> env GROUP ", "******"),
        ("source.group_id", "from-env", "--set", "from-env"),
        ("source.group_id", "**********", "", "******"),
        ("source.group_id", "g1", "", "g1"),
        ("source.bounded", True, "", "true"),
        ("checkpoint.interval", 90_000, "", "90s"),
        ("sink.transaction_timeout", 600_000, "", "10min"),
        ("job.parallelism", 90_000, "", "90000"),
        ("source.topics", ["a", "b"], "", "[a, b]"),
        ("kafka.properties", {"linger.ms": "5"}, "", "{linger.ms: '5'}"),
        ("demo_service.url", "http://u:sekrit@svc:80/x", "", "http://u:******@svc:80/x"),
        ("source.topics", ["http://u:sekrit@h/"], "", "['http://u:******@h/']"),
    ],
)
def test_a_value_is_printed_masked_typed_and_formatted(key, value, source, shown):
    from pipelines.settings.secrets import mask_value

    assert mask_value(key, value, source) == shown


@pytest.mark.parametrize(
    "overrides, mode",
    [
        ((), "thread"),
        (("enrichment.operator=flowing",), "thread"),
        (("enrichment.operator=batched",), "process"),
        (("python.execution_mode=process",), "process"),
        # Named with an operator thread mode cannot run: kept, and refused when the stage
        # is built (test_stages), not silently turned into process mode.
        (("enrichment.operator=batched", "python.execution_mode=thread"), "thread"),
    ],
)
def test_the_execution_mode_is_thread_unless_the_operator_needs_a_worker(tmp_path, overrides, mode):
    loaded = load_settings("demo", overrides=overrides, conf_dir=_conf(tmp_path), environ={})
    assert loaded.settings.python.execution_mode.value == mode
