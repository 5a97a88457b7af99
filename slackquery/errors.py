"""The one exception type the CLI turns into a one-line error and a non-zero exit."""


class SlackqueryError(Exception):
    """A user-facing failure: bad input, a refused operation, a missing prerequisite.

    The message must make sense on its own in one line (name the file, id or setting
    involved). Anything that is not a SlackqueryError is a bug and keeps its traceback.
    """
