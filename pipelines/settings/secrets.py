"""Secrets: which keys hold them, `${env:NAME}` / `${file:path}` references resolved at
load time, and masking in everything printed.

No process-wide registry: whoever prints on behalf of a loaded config holds a SecretMask
that has learned that config's secrets (runner.guarded does, for every error line).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pipelines.settings.values import DURATION_FIELDS, ConfigError, format_ms

if TYPE_CHECKING:
    from pipelines.settings.schema import Settings

DEFAULT_SOURCE = "default"
MASK = "******"

SECRET_REF = re.compile(r"^\$\{(env|file):([^}]+)\}$")
_SECRET_KEY = re.compile(r"(password|secret|jaas|token|credential|(^|[._])key$)", re.I)


def is_secret_key(dotted: str) -> bool:
    return bool(_SECRET_KEY.search(dotted.split(".")[-1])) or "sasl.jaas.config" in dotted


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


def mask_value(key: str, value: Any) -> str:
    if value is None:
        return "null"
    if is_secret_key(key) or (isinstance(value, str) and value == "**********"):
        return "******" if value not in ("", None) else ""
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    if isinstance(value, int) and key.rsplit(".", 1)[-1] in DURATION_FIELDS:
        return format_ms(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


class SecretMask:
    """Removes the secret values of the configs it has learned from free text (error
    lines, exception messages). One per CLI invocation or job run."""

    def __init__(self) -> None:
        self.values: set[str] = set()

    def learn(self, settings: "Settings") -> "SecretMask":
        self.values.update(v for v in secret_values(settings) if v)
        return self

    def __call__(self, text: str) -> str:
        for secret in sorted(self.values, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text


def secret_values(settings: Settings) -> list[str]:
    sec = settings.kafka.security
    values = [s.get_secret_value() for s in (sec.password, sec.ssl_truststore_password) if s]
    for props in (settings.kafka.properties, settings.kafka.librdkafka_properties):
        values += [v for k, v in props.items() if is_secret_key(k)]
    return values
