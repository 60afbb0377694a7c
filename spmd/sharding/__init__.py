from ..ir.mesh import Mesh  # noqa: F401
from ..ir.spec import Sharding  # noqa: F401
