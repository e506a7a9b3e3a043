"""`pytest tests/raft --rewrite` regenerates the expected output of the transcript files."""

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--rewrite", action="store_true", default=False,
                     help="rewrite tests/raft/testdata/*.txt with the actual output (review the diff)")


@pytest.fixture
def rewrite(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--rewrite", default=False))
