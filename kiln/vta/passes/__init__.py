"""The VTA code generator's passes, one concept per module (docs/vta.md):

* ``concrete``: evaluating index expressions over a loop nest with numpy;
* ``inject_dma``: ``env.dma_copy`` loop nests -> 2-D LOAD/STORE with padding;
* ``inject_alu``: ``env.alu`` loop nests -> ALU instructions with micro-op kernels;
* ``fold_uop``: micro-op index arrays -> micro-op kernels with two affine loops (GEMM, ALU);
* ``coproc_sync``: dependence push/pop tokens between the load, compute and store modules.
"""
