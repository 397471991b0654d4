"""kiln's operator library (TVM's ``topi``): tensor-expression definitions of the operators
deep-learning models need, and their schedules.

``from kiln import topi`` (or ``import topi`` / ``from tvm import topi`` under kiln's tvm
alias). Operators build TE computations, each stage tagged (see :mod:`kiln.topi.tag`);
schedules live in ``topi.generic`` (default, correct everywhere), ``topi.x86``
(optimized CPU schedules: parallel, vectorized, register-blocked) and ``topi.cuda`` (GPU
threads)::

    x = te.placeholder((1, 64, 56, 56)); w = te.placeholder((64, 64, 3, 3))
    y = topi.nn.relu(topi.nn.conv2d_nchw(x, w, 1, 1, 1))
    s = topi.x86.schedule_conv2d_nchw([y])
    f = kiln.build(s, [x, w, y])
"""

from . import cuda, generic, nn, tag, utils, x86
from .broadcast import *  # noqa: F403
from .broadcast import __all__ as _broadcast_all
from .math import *  # noqa: F403
from .math import __all__ as _math_all
from .reduction import *  # noqa: F403
from .reduction import __all__ as _reduction_all
from .transform import *  # noqa: F403
from .transform import __all__ as _transform_all

__all__ = (["cuda", "generic", "nn", "tag", "utils", "x86"] + list(_broadcast_all) + list(_math_all)
           + list(_reduction_all) + list(_transform_all))
