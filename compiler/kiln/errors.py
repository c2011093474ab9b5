"""kiln's one exception tree.

Every error kiln reports to a person is a KilnError: ``str(error)`` is a single
line that says what is wrong and, where there is one, what to do. The command
line prints that line and exits with ``exit_code``; no traceback.
"""


class KilnError(Exception):
    """Base of every error kiln reports to a user."""

    exit_code = 1


class UsageError(KilnError):
    """The command was called wrongly: bad arguments, unknown target, missing file."""

    exit_code = 2


class BoardError(KilnError):
    """A board description is malformed; the message names the file and field."""


class ModelError(KilnError):
    """A model could not be loaded, run or exported; the message names the model and what failed."""


class ToolMissingError(KilnError):
    """A tool kiln needs (toolchain, QEMU, FVP) is not installed."""

    exit_code = 127


class InternalError(KilnError):
    """kiln broke one of its own invariants (a bug in kiln, not in the model or the command):
    the message names the compile stage after which the check failed and what broke."""
