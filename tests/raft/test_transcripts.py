"""Data-driven RAFT transcripts (etcd style): each file in testdata/ is a scenario from the paper.

Regenerate with `pytest tests/raft/test_transcripts.py --rewrite` and review the diff.
"""

from pathlib import Path

import pytest

from appliance.testing.datadriven import run_file
from appliance.testing.interaction import InteractionEnv

TESTDATA = Path(__file__).parent / "testdata"
FILES = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_transcript(path: Path, rewrite: bool) -> None:
    env = InteractionEnv()
    mismatches = run_file(path, env.handle, rewrite=rewrite)
    assert not mismatches, "\n\n".join(mismatches)


def test_there_are_transcripts() -> None:
    assert len(FILES) >= 8
