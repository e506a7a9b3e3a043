"""Operating errors: what the world did to us, named by cause. Bugs are asserts, never these."""

from typing import ClassVar


class ApplianceError(Exception):
    """Base of every operating error."""

    retriable: ClassVar[bool] = False


class ConfigError(ApplianceError):
    """A config file or flag is invalid; `problems` lists every one as 'file:line:col: text'."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class ProtocolError(ApplianceError):
    """The peer broke the NATS protocol: reply `-ERR '<client_error>'`, then close."""

    def __init__(self, detail: str, *, client_error: str) -> None:
        super().__init__(detail)
        self.client_error = client_error


class NotLeader(ApplianceError):
    retriable = True

    def __init__(self, detail: str, *, leader_hint: str | None = None) -> None:
        super().__init__(detail)
        self.leader_hint = leader_hint


class ClosedError(ApplianceError):
    """We closed it."""


class BrokenError(ApplianceError):
    """It broke under us; the cause is in __cause__."""


class CorruptData(ApplianceError):
    """Checksum or format mismatch at (path, offset)."""

    def __init__(self, detail: str, *, path: str = "", offset: int = -1) -> None:
        super().__init__(f"{path}:{offset}: {detail}" if path else detail)
        self.path = path
        self.offset = offset


class LimitExceeded(ApplianceError):
    """A named limit from limits.py was hit."""


class ProposalDropped(ApplianceError):
    """The RAFT leader cannot take a proposal now (leader transfer or a membership change pending)."""

    retriable = True


class StartupError(ApplianceError):
    """The server cannot start: a port cannot be bound, a worker target cannot be loaded, ..."""
