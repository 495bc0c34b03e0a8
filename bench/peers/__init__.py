"""The apps a user would write instead, with the peer's own documented patterns."""

from __future__ import annotations

import argparse


def peer_arguments() -> argparse.ArgumentParser:
    """What every peer app is told: where to read and write, as which consumer group."""
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--source", "--sink", "--group", "--state-dir"):
        parser.add_argument(name, required=True)
    return parser
