from .base import Communicator  # noqa: F401
