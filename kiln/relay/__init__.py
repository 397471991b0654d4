"""kiln's graph compiler (TVM's ``relay``): import a model, optimize the graph, compile each
fused group of operators with kiln.topi, and run it with the graph executor.

    mod, params = relay.frontend.from_onnx(onnx_model, shape={"input": (1, 3, 224, 224)})
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    m.set_input("input", x); m.run(); y = m.get_output(0).numpy()
"""

from kiln.runtime.graph_executor import (
    GraphExecutorFactoryModule,
    GraphModule,
    load_module,
    load_param_dict,
    save_param_dict,
)

from . import frontend, transform
from .build_module import PassContext, build, build_config, optimize
from .graph import Graph, Module, Node

__all__ = ["frontend", "transform", "build", "build_config", "PassContext", "optimize",
           "GraphExecutorFactoryModule", "GraphModule", "load_module", "save_param_dict",
           "load_param_dict", "Graph", "Module",
           "Node"]
