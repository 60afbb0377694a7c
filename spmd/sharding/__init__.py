from ..ir.mesh import Mesh  # noqa: F401
from ..ir.mesh import Sharding  # noqa: F401
