"""Which backend the environment asks for. The detection lives in runtime/detect.py
(spmd.init needs it, and runtime/ must not import launcher/); re-exported here."""
from ..runtime.detect import MPI_ENV, detect_backend  # noqa: F401
