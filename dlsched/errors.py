"""User-facing errors, and warnings.

Every problem with the user's input (a corrupt file, a cycle, a missing oracle
entry, a priority file for another model, a dead peer) is raised as a
:class:`DlschedError`. The CLI prints its message as one paragraph and exits
with code 2; it never shows a traceback for these. A result that stands but
may mislead is flagged with :class:`DlschedWarning` (``warnings.warn``); the CLI
prints it as one ``warning:`` line on stderr.
"""


class DlschedError(Exception):
    """A problem with the user's input or environment, reported without a traceback."""

    exit_code = 2


class GraphError(DlschedError):
    """The model's graph is malformed (cycle, duplicate names, dangling edges)."""


class ImportFailure(DlschedError):
    """A model file could not be read or converted into a DAG."""


class OracleError(DlschedError):
    """A time oracle is malformed or does not cover the DAG."""


class PriorityFileError(DlschedError):
    """A priority file is malformed or was made for another model."""


class OutputError(DlschedError):
    """An output file cannot be written (read-only folder, full disk, a directory in the way)."""


class WorkLimitError(DlschedError):
    """Work estimated from the options exceeds its budget (:mod:`dlsched.limits`); ``--max-work`` lifts it."""


class DlschedWarning(UserWarning):
    """The result stands, but the user should know something about it (printed as ``warning: …`` by the CLI)."""
