"""A job's own settings: a section of its YAML that the job declares, not the framework.

A job declares its sections with itself (`Job(build, sections=(...))`, pipelines.api),
each a JobSection subclass that names its section:

    class Pricing(JobSection):
        section: ClassVar[str] = "pricing"
        table: Path
        api_token: str

    job = Job(build, sections=(Pricing,))

    def lookup_client(settings):
        pricing = Pricing.of(settings)

The loader merges such a section through the same layers as the project's own, refuses
its unknown keys with the same one-line errors, and masks its secrets in every printout.

Why the workers validate it again: a Python function's settings are pickled into the job
graph, and a pickled secret travels in clear (secrets.without_secrets). A job section is
carried there as its merged tree with every `${env:}`/`${file:}` reference still a
reference, and `of` resolves and validates it where it runs, from that machine's
environment and files. So a secret of a section must be a reference (or a
`PIPELINES__SECTION__KEY` variable, carried as the reference to it): a value written in a
file or given with `--set` is refused, since it could only travel as itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import ValidationError

from pipelines.settings.secrets import SECRET_REF, is_secret_key, resolve_secret_refs
from pipelines.settings.values import ConfigError, Model

if TYPE_CHECKING:
    from pipelines.settings.schema import Settings

S = TypeVar("S", bound="JobSection")


class JobSection(Model):
    """The base of a job's own section: unknown keys refused, values frozen. `section` is
    the top-level key it is read from (the job's choice; not one of the project's)."""

    section: ClassVar[str]

    @classmethod
    def of(cls: type[S], settings: Settings) -> S:
        """This section of `settings`: validated at load time in the process that loaded
        them; on a worker, resolved from the worker's environment and validated once."""
        found = settings._sections.get(cls.section)
        if isinstance(found, cls):
            return found
        tree = settings._section_trees.get(cls.section)
        if tree is None:
            raise ConfigError(
                f"{cls.section}: no such section in these settings; the job module lists "
                f"{cls.__name__} in its Job's sections so that its settings are loaded with it"
            )
        resolved = resolve_secret_refs(tree, {}, f"{cls.section}.")  # new dicts, tree kept
        try:
            found = cls.model_validate(resolved)
        except ValidationError as exc:
            raise ConfigError(
                "; ".join(
                    f"{'.'.join(str(p) for p in (cls.section, *err['loc']))}: {err['msg']}"
                    for err in exc.errors()
                )
            ) from None
        settings._sections[cls.section] = found
        return found


def declared(
    sections: Iterable[type[JobSection]], reserved: Iterable[str]
) -> dict[str, type[JobSection]]:
    """name -> model of a job's sections; a name the project uses, or two models under one
    name, is refused."""
    found: dict[str, type[JobSection]] = {}
    taken = set(reserved)
    for model in sections:
        name = getattr(model, "section", None)
        if not (isinstance(model, type) and issubclass(model, JobSection)) or not name:
            raise ConfigError(
                f"sections: {model!r} is not a JobSection with a `section` name "
                f"(pipelines.settings.JobSection)"
            )
        if name in taken:
            raise ConfigError(
                f"sections: {model.__name__} names section {name!r}, which "
                + ("another of the job's models names" if name in found else "the project uses")
                + f"; choose another name (taken: {', '.join(sorted(taken))})"
            )
        found[name] = model
        taken.add(name)
    return found


def as_references(tree: Mapping[str, Any], sources: dict[str, str], prefix: str) -> dict[str, Any]:
    """The section's merged tree as a worker may carry it: a secret from the environment
    layer becomes the reference to its variable; a secret written as a value is refused."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out[key] = as_references(value, sources, dotted + ".")
            continue
        source = sources.get(dotted, "")
        if is_secret_key(dotted) and value not in (None, "") and not _is_reference(value):
            if source.startswith("env "):
                value = "${env:" + source.removeprefix("env ") + "}"
            else:
                raise ConfigError(
                    f"{source or 'default'}: {dotted}: a secret of a job's own section is "
                    f"read by the workers themselves: write ${{env:NAME}} or ${{file:path}} "
                    f"(value not shown)"
                )
        out[key] = value
    return out


def _is_reference(value: Any) -> bool:
    return isinstance(value, str) and bool(SECRET_REF.match(value.strip()))


def dumped(settings: Settings, **kwargs: Any) -> dict[str, Any]:
    """`settings.model_dump(**kwargs)` with the job's own sections at the top level beside
    the project's (what `config show` and a package's effective config print)."""
    tree = settings.model_dump(**kwargs)
    for name, section in sorted(settings._sections.items()):
        tree[name] = section.model_dump(mode=kwargs.get("mode", "python"))
    return tree


__all__: Sequence[str] = ["JobSection", "as_references", "declared", "dumped"]
