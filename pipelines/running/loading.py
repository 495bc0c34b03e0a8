"""A job's arguments, settings and preflight, the same from every entry point (`pipelines
run`, `python -m pipelines.jobs.<job>`, `flink run --pyModule`, the Beam runner): settings
loaded and validated, preflight run, a resumed checkpoint checked, before anything starts."""

from __future__ import annotations

import argparse
import logging

from pipelines import jobs
from pipelines.flink.checkpoints import resolve_checkpoint, transaction_risk
from pipelines.kafka.preflight import has_errors, run_preflight
from pipelines.running.errors import Failure
from pipelines.settings import Loaded, load_settings

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


def load(job: str, args: argparse.Namespace, overrides: list[str] | None = None) -> Loaded:
    """The job's settings from the layers `args` names; its secrets are learned by the
    invocation's mask (`args.mask`, see `guarded`) so no error line can show them."""
    loaded = load_settings(
        job,
        env=args.env,
        conf_dir=args.conf_dir,
        overrides=list(args.overrides or []) if overrides is None else overrides,
        # A Beam pipeline (pipelines/beam) declares no sections of its own yet.
        sections=jobs.sections(load_job(job)) if job in jobs.names() else (),
    )
    mask = getattr(args, "mask", None)
    if mask is not None:
        mask.learn(loaded.settings)
    return loaded


def prepare(job: str, args: argparse.Namespace) -> Loaded:
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
        preflight_job(loaded.settings, load_job(job))
    return loaded


def preflight_job(settings, module) -> None:
    """Every preflight rule for a job module (its USES and its lookup client's check); the
    problems are logged, and any error raises Failure before anything starts."""
    problems = run_preflight(
        settings, uses=jobs.uses(module), client=jobs.lookup_client(module, settings)
    )
    for problem in problems:
        log.info(str(problem))
    if has_errors(problems):
        raise Failure(
            f"preflight found {sum(p.level == 'error' for p in problems)} error(s); "
            f"nothing was started"
        )


def load_job(job: str):
    try:
        return jobs.load(job)
    except jobs.UnknownJob as exc:
        raise Failure(str(exc)) from None


def job_names() -> list[str]:
    return jobs.names()
