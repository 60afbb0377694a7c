"""Error types. Every error spmd raises on bad input is an SpmdError that names the
user's line, the op, the shapes and (where they matter) the shardings."""


class SpmdError(Exception):
    """Base class of every error spmd raises on bad input."""


class ShapeError(SpmdError, ValueError):
    """An op was given operands whose shapes or dtypes it cannot take."""


class TraceError(SpmdError, TypeError):
    """User code did something tracing cannot follow (a Python branch on a traced value...)."""


class ParseError(SpmdError, ValueError):
    """The IR text parser was given malformed text."""


class ShardingError(SpmdError, ValueError):
    """A sharding or mesh is malformed or does not fit the value it annotates."""


class CheckpointError(SpmdError, ValueError):
    """A checkpoint is missing, corrupt, truncated, or its index is malformed or unsafe."""


class CollectiveError(SpmdError, RuntimeError):
    """A collective failed: a rank was lost, timed out, or raised."""


def where(loc):
    return f" at {loc}" if loc else ""
