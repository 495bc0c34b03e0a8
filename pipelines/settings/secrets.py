"""Secrets: which keys hold them, `${env:NAME}` / `${file:path}` references resolved at
load time, and masking in everything printed.

No process-wide registry: whoever prints on behalf of a loaded config holds a SecretMask
that has learned that config's secrets (errors.guarded does, for every error line).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pipelines.settings.schema import KafkaSecurity
from pipelines.settings.values import DURATION_FIELDS, ConfigError, format_ms

if TYPE_CHECKING:
    from pipelines.settings.schema import Settings

DEFAULT_SOURCE = "default"
MASK = "******"

SECRET_REF = re.compile(r"^\$\{(env|file):([^}]+)\}$")
# Matched against a key's last part, or a client property's whole name, lower case: a
# secret named by its last part (password, passphrase, token, ...), private keys by name
# (`private.key`), HTTP user info (`basic.auth.user.info`) and whole SASL configs
# (`sasl.jaas.config`, `sasl.oauthbearer.config`).
_SECRET_KEY = re.compile(
    r"(password|passphrase|passwd|secret|jaas|token|credential|api[._-]?key"
    r"|private[._-]?key|user[._-]?info|oauthbearer\.config)"
)
# Client properties that hold a key inline (`ssl.keystore.key`, librdkafka's `ssl.key.pem`);
# a typed key named `key` (a record field) is no secret.
_INLINE_KEY = re.compile(r"(^|[._])key(\.pem)?$")
# user:password@ in a URL (an enrichment URL, a schema registry's): the password is secret
# wherever the URL sits.
URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<password>[^@/\s]+)@", re.I
)
# A source (loader provenance) that says the value came from a reference.
_FROM_REFERENCE = re.compile(r"-> (env|file) ")


def is_secret_property(name: str) -> bool:
    """A Kafka client property (Java or librdkafka) that holds a secret."""
    lowered = name.lower()
    return bool(_SECRET_KEY.search(lowered) or _INLINE_KEY.search(lowered))


def is_secret_key(dotted: str) -> bool:
    """A config key (dotted, as `config show` prints it) that holds a secret."""
    lowered = dotted.lower()
    if "properties." in lowered:  # kafka.properties.<name>, source.properties.<name>
        return is_secret_property(lowered.split("properties.", 1)[1])
    return bool(_SECRET_KEY.search(lowered.rsplit(".", 1)[-1]))


def from_reference(source: str) -> bool:
    """Whether a value's provenance says it came from `${env:}`/`${file:}`: such a value is
    a secret wherever it sits, whatever its key is called."""
    return bool(_FROM_REFERENCE.search(source or ""))


def url_passwords(value: Any) -> list[str]:
    return (
        [m.group("password") for m in URL_PASSWORD.finditer(value)]
        if isinstance(value, str)
        else []
    )


def mask_urls(text: str) -> str:
    return URL_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}@", text)


def resolve_secret_refs(tree: Any, sources: dict[str, str], prefix: str = "") -> Any:
    if isinstance(tree, dict):
        return {k: resolve_secret_refs(v, sources, f"{prefix}{k}.") for k, v in tree.items()}
    if isinstance(tree, str):
        match = SECRET_REF.match(tree.strip())
        if match:
            kind, name = match.groups()
            key = prefix.rstrip(".")
            origin = sources.get(key, DEFAULT_SOURCE)
            if kind == "env":
                if name not in os.environ:
                    raise ConfigError(f"{origin}: {key}: environment variable {name} is not set")
                sources[key] = f"{origin} -> env {name}"
                return os.environ[name]
            path = Path(name).expanduser()
            if not path.is_file():
                raise ConfigError(f"{origin}: {key}: secret file {name} does not exist")
            sources[key] = f"{origin} -> file {name}"
            try:
                return path.read_text(encoding="utf-8").strip()
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"{origin}: {key}: secret file {name} is not UTF-8 text "
                    f"(byte {exc.start}); write the secret as text"
                ) from None
            except OSError as exc:
                raise ConfigError(
                    f"{origin}: {key}: secret file {name} cannot be read: {exc.strerror}"
                ) from None
    return tree


def mask_value(key: str, value: Any, source: str = "") -> str:
    if value is None:
        return "null"
    if (
        is_secret_key(key)
        or from_reference(source)
        or (isinstance(value, str) and value == "**********")
    ):
        return MASK if value not in ("", None) else ""
    if isinstance(value, (list, dict)):
        return mask_urls(yaml.safe_dump(value, default_flow_style=True, width=10_000).strip())
    if isinstance(value, int) and key.rsplit(".", 1)[-1] in DURATION_FIELDS:
        return format_ms(value)
    return str(value).lower() if isinstance(value, bool) else mask_urls(str(value))


# Shorter values are left in free text: masking every "1" or "prod" in an error line would
# hide more than it protects (a value from a reference is still masked where its key is
# printed, e.g. `config show`).
MIN_MASKED = 4


class SecretMask:
    """Removes the secret values of the configs it has learned from free text (error
    lines, exception messages). One per CLI invocation or job run."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def learn(self, settings: "Settings") -> "SecretMask":
        self.values.update(v for v in secret_values(settings) if len(v) >= MIN_MASKED)
        return self

    def __call__(self, text: str) -> str:
        for secret in sorted(self.values, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return mask_urls(text)


def secret_values(settings: Settings) -> list[str]:
    """Every secret a loaded config holds: the typed passwords, secret-named properties,
    whatever came from a reference (the loader marks those), passwords in URLs."""
    sec = settings.kafka.security
    values = [
        s.get_secret_value()
        for s in (
            sec.password,
            sec.ssl_truststore_password,
            sec.ssl_keystore_password,
            sec.ssl_key_password,
        )
        if s
    ]
    for props in (
        settings.kafka.properties,
        settings.kafka.librdkafka_properties,
        settings.source.properties,
    ):
        values += [v for k, v in props.items() if is_secret_property(k)]
    values += sorted(referenced_values(settings))
    for leaf in _string_leaves(settings.model_dump(mode="json")):
        values += url_passwords(leaf)
    return [v for v in values if v]


def referenced_values(settings: Settings) -> set[str]:
    return set(getattr(settings, "_referenced", None) or ())


def _string_leaves(tree: Any):
    if isinstance(tree, dict):
        for value in tree.values():
            yield from _string_leaves(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _string_leaves(value)
    elif isinstance(tree, str):
        yield tree


def without_secrets(settings: Settings) -> Settings:
    """The settings a Python function may carry: no Kafka credentials, no secret client
    property, no value that came from a reference in the Kafka sections.

    Python functions are pickled into the job graph, which travels to a JobManager (over
    plain HTTP unless its REST TLS is on) and is kept in its blob store; a pickled pydantic
    SecretStr holds its value in clear. Only the Java Kafka builders need the credentials,
    and they get them from the full settings while the graph is built."""
    referenced = referenced_values(settings)

    def kept(props: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in props.items() if not is_secret_property(k) and v not in referenced}

    kafka = settings.kafka.model_copy(
        update={
            "security": KafkaSecurity(),
            "properties": kept(settings.kafka.properties),
            "librdkafka_properties": kept(settings.kafka.librdkafka_properties),
            "bootstrap_servers": (
                ""
                if settings.kafka.bootstrap_servers in referenced
                else settings.kafka.bootstrap_servers
            ),
        }
    )
    source = settings.source.model_copy(update={"properties": kept(settings.source.properties)})
    bare = settings.model_copy(update={"kafka": kafka, "source": source})
    bare._referenced = frozenset()
    # A job's own sections travel as their trees, references unresolved (settings.sections)
    bare._sections = {}
    return bare
