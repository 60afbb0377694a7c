"""The op registry, populated by one module per op family."""
from .registry import REGISTRY, OpDef, get_op, register  # noqa: F401
from . import elementwise, shape, reduce, dot, indexing, collective  # noqa: F401
from . import annotation  # noqa: F401,E402
from . import linalg, sort, select, fft  # noqa: F401,E402
from . import control  # noqa: F401,E402
from . import remat  # noqa: F401,E402
from . import debug  # noqa: F401,E402
