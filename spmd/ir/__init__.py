from .graph import Aval, Graph, Op, Value, clone, splat  # noqa: F401
from .ops import REGISTRY, OpDef, get_op  # noqa: F401
from .mesh import Mesh  # noqa: F401
from .spec import Sharding  # noqa: F401
from .text_parse import parse_graph  # noqa: F401,E402
