from .graph import Aval, Graph, Op, Value, clone  # noqa: F401
from .ops import REGISTRY, OpDef, get_op  # noqa: F401
