"""The op registry, populated by one module per op family."""
from .registry import REGISTRY, OpDef, get_op, register  # noqa: F401
from . import elementwise, shape, reduce, dot, indexing, collective  # noqa: F401
from . import annotation  # noqa: F401,E402
from . import linalg, sort, select, fft  # noqa: F401,E402
from . import control  # noqa: F401,E402
from . import remat  # noqa: F401,E402
from . import debug  # noqa: F401,E402

# Ops are built and compared by the constants of names.py, so a misspelled name fails when
# its module is imported; here, an op registered without its constant (or a constant left
# for an op that is gone) fails too.
from . import names  # noqa: E402
from .registry import names_mismatch  # noqa: E402
if names_mismatch(names.ALL) or any(getattr(names, n.upper(), None) != n for n in REGISTRY):
    raise ImportError(names_mismatch(names.ALL) or "spmd/ir/ops/names.py: each op's constant is its name "
                      "in capitals (ADD = \"add\")")
