"""A job's arguments, settings and preflight, the same from every entry point (`pipelines
run`, `python -m pipelines.jobs.<job>`, `flink run --pyModule`, the Beam runner): settings
loaded and validated, preflight run, a resumed checkpoint checked, before anything starts.
The services a job calls are checked once it is built (pipelines.running.wiring)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Protocol

from pipelines.flink.checkpoints import resolve_checkpoint, transaction_risk
from pipelines.kafka.preflight import has_errors, run_preflight
from pipelines.running.errors import Failure
from pipelines.settings import JobSection, Loaded, load_settings

log = logging.getLogger(__name__)


def job_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--env", help="config overlay: conf/<env>/<job>.yaml")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable)",
    )
    parser.add_argument("--conf-dir", help="config root (default: the project's conf/)")
    parser.add_argument(
        "--skip-preflight", action="store_true", help="start without the broker-aware checks"
    )
    parser.add_argument(
        "--from-checkpoint",
        metavar="PATH|latest",
        help="resume from a retained checkpoint or savepoint",
    )
    parser.add_argument(
        "--accept-transaction-loss",
        action="store_true",
        help="restore a checkpoint older than sink.transaction_timeout anyway (its aborted "
        "transactions' records are lost)",
    )
    return parser


class Named(Protocol):
    """A job as loading reads it (pipelines.running.job.Job): its name and its own sections."""

    @property
    def name(self) -> str: ...

    @property
    def sections(self) -> Sequence[type[JobSection]]: ...


def load(job: Named | str, args: argparse.Namespace, overrides: list[str] | None = None) -> Loaded:
    """The job's settings from the layers `args` names, with its own sections (a Beam
    pipeline's name: none); its secrets are learned by the invocation's mask (`args.mask`,
    see `guarded`) so no error line can show them."""
    name, sections = (job, ()) if isinstance(job, str) else (job.name, job.sections)
    loaded = load_settings(
        name,
        env=args.env,
        conf_dir=args.conf_dir,
        overrides=list(args.overrides or []) if overrides is None else overrides,
        sections=sections,
    )
    mask = getattr(args, "mask", None)
    if mask is not None:
        mask.learn(loaded.settings)
    return loaded


def prepare(job: Named | str, args: argparse.Namespace) -> Loaded:
    """Load, validate and preflight the settings; raise Failure on anything that would not run."""
    overrides = list(args.overrides or [])
    loaded = load(job, args, overrides)
    if getattr(args, "from_checkpoint", None):
        path = resolve_checkpoint(loaded.settings, args.from_checkpoint)
        loaded = load(job, args, overrides + [f"job.from_checkpoint={path}"])
        risk = transaction_risk(loaded.settings, path)
        if risk and not getattr(args, "accept_transaction_loss", False):
            raise Failure(risk)
        if risk:
            log.info(f"warning: --accept-transaction-loss: {risk.split('. Restore anyway')[0]}")
        log.info(f"resuming from {path}")
    if not args.skip_preflight:
        preflight(loaded.settings)
    return loaded


def preflight(settings, uses: tuple[str, ...] = (), client=None) -> None:
    """The preflight rules (the settings, the broker; the enrichment service when `uses`
    names it and `client` can check it); the problems are logged, and any error raises
    Failure before anything starts."""
    problems = run_preflight(settings, uses=uses, client=client)
    for problem in problems:
        log.info(str(problem))
    if has_errors(problems):
        raise Failure(
            f"preflight found {sum(p.level == 'error' for p in problems)} error(s); "
            f"nothing was started"
        )
