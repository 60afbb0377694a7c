from .graph import Aval, Graph, Op, Value, clone  # noqa: F401
from .ops import REGISTRY, OpDef, get_op  # noqa: F401
from .ops.registry import splat  # noqa: F401
from .reads import RECOMPUTE_LIMIT, places_read, recomputed_ops  # noqa: F401
from .mesh import AUTO, Mesh, Sharding, is_auto  # noqa: F401
from .text_parse import parse_graph  # noqa: F401
