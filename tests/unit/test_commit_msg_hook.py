"""The commit-msg hook (`make hooks`): a subject of at most 72 characters, then a blank
line and a body that says why; each refusal is one line naming the rule."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

HOOK = Path(__file__).resolve().parents[2] / ".githooks" / "commit-msg"


def check(tmp_path: Path, message: str) -> tuple[int, str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    proc = subprocess.run([str(HOOK), str(path)], capture_output=True, text=True, timeout=30)
    return proc.returncode, proc.stderr.strip()


def test_a_short_subject_with_a_body_passes(tmp_path):
    assert check(tmp_path, "Say what in 72 or fewer\n\nSay why.\n# a comment git adds\n") == (0, "")


@pytest.mark.parametrize(
    "message, refusal",
    [
        ("x" * 73 + "\n\nwhy\n", "the subject is 73 characters; at most 72"),
        ("What\nwhy, with no blank line\n", "a blank line goes between the subject and the body"),
        ("What\n\n# only git's comments\n", "no body: say why the change is made"),
        ("\n", "the subject line is empty"),
    ],
)
def test_a_message_against_a_rule_is_refused_naming_it(tmp_path, message, refusal):
    code, err = check(tmp_path, message)
    assert code == 1
    assert err.startswith(f"commit-msg: {refusal}")
