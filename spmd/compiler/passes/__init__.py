"""Graph -> Graph passes. Each is a plain function; `run_passes` applies a list in order."""
from .dce import dce  # noqa: F401
