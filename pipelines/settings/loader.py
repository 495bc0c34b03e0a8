"""The layered loader: every layer merged, secret references resolved, one validation,
and for each leaf key the layer that set it (its provenance). Layers, lowest first:

    defaults in code < conf/base/<job>.yaml < conf/<env>/<job>.yaml
    < conf/local/<job>.yaml (git-ignored) < PIPELINES__SECTION__KEY env vars < --set key=value

so an error names the file and the key, and `pipelines config show` says where each value
came from.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pipelines.host import paths
from pipelines.settings.client_properties import property_conflicts
from pipelines.settings.schema import Settings
from pipelines.settings.secrets import (
    DEFAULT_SOURCE,
    from_reference,
    is_secret_key,
    mask_value,
    resolve_secret_refs,
)
from pipelines.settings.sections import JobSection, as_references, declared
from pipelines.settings.sections import dumped as dumped_settings
from pipelines.settings.values import ConfigError

ENV_PREFIX = "PIPELINES__"


class Loaded:
    """Validated settings plus, for each leaf key, the layer that set it."""

    def __init__(self, settings: Settings, sources: dict[str, str], raw: dict[str, Any]):
        self.settings = settings
        self.sources = sources
        self.raw = raw


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and not dotted.endswith("properties"):
            flat.update(_flatten(value, dotted + "."))
        elif isinstance(value, dict) and dotted.endswith("properties"):
            for k, v in value.items():
                flat[f"{dotted}.{k}"] = v
        else:
            flat[dotted] = value
    return flat


def _merge(
    base: dict[str, Any],
    overlay: dict[str, Any],
    origin: str,
    sources: dict[str, str],
    prefix: str = "",
) -> None:
    for key, value in overlay.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, origin, sources, dotted + ".")
        else:
            base[key] = value
            if isinstance(value, dict):
                for leaf in _flatten(value, dotted + "."):
                    sources[leaf] = origin
            sources[dotted] = origin


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    # Kafka property names contain dots: everything after `properties.` (or
    # `librdkafka_properties.`) is one key.
    marks = [i for i, part in enumerate(parts) if part.endswith("properties")]
    if marks:
        i = marks[0]
        parts = parts[: i + 1] + [".".join(parts[i + 1 :])] if i + 1 < len(parts) else parts
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {part} is not a section")
    node[parts[-1]] = value


def _read_yaml(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{_rel(path)}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
            f"offset {exc.start}); save the file as UTF-8"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{_rel(path)}:{where}: not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{_rel(path)}: the top level must be a mapping of sections, not {type(data).__name__}"
        )
    return data


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _scalar(text: str) -> Any:
    """`--set` and env values are YAML scalars: 3 is an int, true a bool, [a,b] a list."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _value_for(dotted: str, text: str) -> Any:
    """A secret is the text as given: YAML would turn `12345678` into a number (then echo
    it in a type error) and `0123` into 83."""
    return text if is_secret_key(dotted) else _scalar(text)


def _allowed_for(
    model: type[BaseModel], loc: tuple[Any, ...], also_known: tuple[str, ...] = ()
) -> str | None:
    """What a key may hold, for messages: the enum values or the section's known keys."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            names = ", ".join(sorted([*fields, *also_known])) if fields else None
            return f"known keys here: {names}" if names else None
        annotation = fields[part].annotation
        current = _unwrap(annotation)
    if isinstance(current, type) and issubclass(current, Enum):
        return "allowed: " + ", ".join(m.value for m in current)
    return None


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if args:
        for arg in args:
            inner = _unwrap(arg)
            if isinstance(inner, type) and (issubclass(inner, (BaseModel, Enum))):
                return inner
    return annotation


def _explain(
    exc: ValidationError,
    sources: dict[str, str],
    model: type[BaseModel] = Settings,
    prefix: tuple[str, ...] = (),
    also_known: tuple[str, ...] = (),
) -> str:
    """One line per error, naming the file and the key; `prefix` is where `model` sits in
    the whole config (a job's section), `also_known` the job's sections beside the
    project's at the top level."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in prefix + loc)
        etype = err["type"]
        if etype == "extra_forbidden":
            section = loc[:-1]
            allowed = _allowed_for(model, section + ("\0",), () if section else also_known)
            msg = f"unknown key; {allowed or ''}"
        elif etype == "missing":
            msg = "required but not set"
        elif etype == "enum":
            allowed = _allowed_for(model, loc) or ""
            msg = f"{err.get('input')!r} is not allowed; {allowed}"
        else:
            msg = err["msg"].removeprefix("Value error, ")
            if is_secret_key(key):
                msg = f"{msg} (value not shown: it is a secret; quote it in YAML)"
            elif (
                "input" in err
                and etype not in ("value_error",)
                and not isinstance(err["input"], dict)
            ):
                msg = f"{msg} (got {err['input']!r})"
        origin = _origin_of(key, sources)
        lines.append(f"{origin}: {key}: {msg}")
    return "\n".join(lines)


def _origin_of(key: str, sources: dict[str, str]) -> str:
    probe = key
    while probe:
        if probe in sources:
            return sources[probe]
        probe = probe.rpartition(".")[0]
    # a section-level problem: name the files that touched the section
    touched = sorted({v for k, v in sources.items() if k.startswith(key + ".")})
    return " + ".join(touched) if touched else DEFAULT_SOURCE


def load_settings(
    job: str,
    env: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    conf_dir: Path | str | None = None,
    environ: dict[str, str] | None = None,
    local: bool = True,
    sections: Sequence[type[JobSection]] = (),
) -> Loaded:
    """Build validated settings for `job` from every layer; raise ConfigError otherwise.
    `local` False leaves conf/local out: an image or package built for others takes
    nothing from this machine's own overrides. `sections` are the job's own
    (`Job.sections`, pipelines.running.job): a top-level key none of them declares is refused."""
    own = declared(sections, Settings.model_fields)
    conf = Path(conf_dir) if conf_dir else paths.conf_dir()
    environ = dict(os.environ) if environ is None else environ
    tree: dict[str, Any] = {"job": {"name": job}}
    sources: dict[str, str] = {"job.name": DEFAULT_SOURCE}
    applied = [DEFAULT_SOURCE]  # each layer's origin, lowest first
    for path in _layer_files(conf, job, env, local):
        applied.append(_rel(path))
        _merge(tree, _read_yaml(path), applied[-1], sources)
    for origin, dotted, value in _given_values(environ, overrides):
        applied.append(origin)
        piece: dict[str, Any] = {}
        _set_dotted(piece, dotted, value)
        _merge(tree, piece, origin, sources)
    _fix_capacity_without_growth(tree, sources, applied)

    given: dict[str, dict[str, Any]] = {}  # the job's sections, as the layers merged them
    for name in own:
        section = tree.pop(name, None)
        if section is not None and not isinstance(section, dict):
            raise ConfigError(
                f"{_origin_of(name, sources)}: {name}: a section of keys, not "
                f"{type(section).__name__}"
            )
        given[name] = section or {}
    # what a pickled function carries: references, never a secret's value
    trees = {name: as_references(section, sources, f"{name}.") for name, section in given.items()}
    resolved = resolve_secret_refs(tree, sources)
    try:
        settings = Settings.model_validate(resolved)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, sources, also_known=tuple(own))) from None
    for name, model in own.items():
        resolved[name] = resolve_secret_refs(given[name], sources, f"{name}.")
        try:
            settings._sections[name] = model.model_validate(resolved[name])
        except ValidationError as exc:
            raise ConfigError(_explain(exc, sources, model, (name,))) from None
    settings._section_trees = trees
    conflicts = property_conflicts(settings)
    if conflicts:
        raise ConfigError(
            "\n".join(f"{_origin_of(key, sources)}: {key}: {why}" for key, why in conflicts)
        )
    if settings.job.name != job:
        raise ConfigError(
            f"{sources.get('job.name')}: job.name: {settings.job.name!r} must match "
            f"the job being run ({job!r})"
        )
    settings._referenced = frozenset(
        str(value)
        for key, value in _flatten(resolved).items()
        if value not in (None, "") and from_reference(sources.get(key, ""))
    )
    return Loaded(settings, sources, resolved)


def _layer_files(conf: Path, job: str, env: str | None, local: bool) -> list[Path]:
    """The job's YAML layers, lowest first: base, the env's overlay, this machine's own."""
    base = conf / "base" / f"{job}.yaml"
    if not base.is_file():
        known = sorted(p.stem for p in (conf / "base").glob("*.yaml"))
        raise ConfigError(
            f"{_rel(base)}: no such job config; jobs with a config: {', '.join(known) or 'none'}"
        )
    layers = [base]
    if env:
        overlay = conf / env / f"{job}.yaml"
        if not overlay.is_file():
            envs = sorted(
                p.name for p in conf.iterdir() if p.is_dir() and p.name not in ("base", "local")
            )
            raise ConfigError(
                f"{_rel(overlay)}: no overlay for env {env!r}; "
                f"envs with a {job}.yaml: "
                f"{', '.join(e for e in envs if (conf / e / f'{job}.yaml').is_file()) or 'none'}"
            )
        layers.append(overlay)
    local_layer = conf / "local" / f"{job}.yaml"
    if local and local_layer.is_file():
        layers.append(local_layer)
    return layers


def _given_values(environ: dict[str, str], overrides) -> list[tuple[str, str, Any]]:
    """(origin, dotted key, value) from PIPELINES__ variables, then from --set, in order."""
    given = []
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX):
            dotted = name[len(ENV_PREFIX) :].lower().replace("__", ".")
            given.append((f"env {name}", dotted, _value_for(dotted, environ[name])))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"--set {item}: expected key=value, e.g. --set source.group_id=my-group"
            )
        key, _, value = item.partition("=")
        given.append(("--set", key.strip(), _value_for(key.strip(), value)))
    return given


def _fix_capacity_without_growth(
    tree: dict[str, Any], sources: dict[str, str], applied: list[str]
) -> None:
    """A capacity set in a layer above the one that set `max_capacity` is the most in
    flight: the growth bound of a lower layer is dropped, unless the same or a later layer
    asks for growth again. (`--set enrichment.capacity=20` spares a fragile service even
    when the job's YAML lets the bound grow.)"""
    enrichment = tree.get("enrichment")
    if not isinstance(enrichment, dict) or enrichment.get("max_capacity") is None:
        return
    capacity_from = sources.get("enrichment.capacity")
    growth_from = sources.get("enrichment.max_capacity")
    if capacity_from is None or growth_from is None:
        return

    def rank(origin: str) -> int:
        return len(applied) - 1 - applied[::-1].index(origin)

    if rank(capacity_from) > rank(growth_from):
        enrichment["max_capacity"] = None
        sources["enrichment.max_capacity"] = f"{capacity_from} (capacity set without max_capacity)"


def effective_view(loaded: Loaded) -> list[tuple[str, str, str]]:
    """(key, value, where it came from) for every leaf, secrets masked: for printing."""
    dumped = dumped_settings(loaded.settings, mode="json")
    rows = []
    for key, value in sorted(_flatten(dumped).items()):
        shown = mask_value(key, value, _origin_of(key, loaded.sources))
        rows.append(
            (
                key,
                shown,
                _origin_of(key, loaded.sources)
                if key in loaded.sources or any(k.startswith(key) for k in loaded.sources)
                else DEFAULT_SOURCE,
            )
        )
    return rows
