"""VTA's convolution-optimization tutorial: a 2-D convolution with virtual threads.

``conv2d(env, ...)`` returns ``s, [data, kernel, res]`` in VTA's layouts (``N/BATCH x
C/BLOCK_IN x H x W x BATCH x BLOCK_IN`` data): int8 conv2d accumulated in int32, then
``>> 8``, relu and a clip to int8 on the ALU; the output is tiled into ``h_block x
w_block`` pixels by ``oc_block`` channel blocks, input channels are loaded ``ic_block``
blocks at a time with their padding, and output-channel blocks are spread over ``vthreads``
virtual threads, so that one thread's loads overlap the other's GEMMs.
``conv2d_reference`` is numpy's answer. ``kiln bench vta`` runs ResNet-18's 3x3 layers.
"""

import numpy as np

from kiln import te


def conv2d(env, batch=1, in_channels=32, out_channels=32, height=8, width=8, kernel=3, pad=1,
           stride=1, h_block=4, w_block=8, oc_block=1, ic_block=1, vthreads=2):
    """VTA's convolution-optimization tutorial: NCHW1n16c int8 conv2d, then >> 8, relu and
    a clip to int8, tiled over output rows/columns/channels, input channels loaded in
    blocks, output channel blocks over ``vthreads`` virtual threads."""
    from kiln import topi

    fout_h = (height + 2 * pad - kernel) // stride + 1
    fout_w = (width + 2 * pad - kernel) // stride + 1
    data_shape = (batch // env.BATCH, in_channels // env.BLOCK_IN, height, width,
                  env.BATCH, env.BLOCK_IN)
    kernel_shape = (out_channels // env.BLOCK_OUT, in_channels // env.BLOCK_IN, kernel, kernel,
                    env.BLOCK_OUT, env.BLOCK_IN)
    output_shape = (batch // env.BATCH, out_channels // env.BLOCK_OUT, fout_h, fout_w,
                    env.BATCH, env.BLOCK_OUT)
    data = te.placeholder(data_shape, name="data", dtype=env.inp_dtype)
    weight = te.placeholder(kernel_shape, name="kernel", dtype=env.wgt_dtype)
    data_buf = topi.nn.pad(data, [0, 0, pad, pad, 0, 0], name="data_buf")
    kernel_buf = te.compute(kernel_shape, lambda *i: weight(*i), "kernel_buf")
    ic = te.reduce_axis((0, in_channels // env.BLOCK_IN), name="ic")
    dy = te.reduce_axis((0, kernel), name="dy")
    dx = te.reduce_axis((0, kernel), name="dx")
    ic_tns = te.reduce_axis((0, env.BLOCK_IN), name="ic_tns")
    res_conv = te.compute(
        output_shape,
        lambda bo, co, i, j, bi, ci: te.sum(
            data_buf[bo, ic, i * stride + dy, j * stride + dx, bi, ic_tns].astype(env.acc_dtype)
            * kernel_buf[co, ic, dy, dx, ci, ic_tns].astype(env.acc_dtype),
            axis=[ic, dy, dx, ic_tns]), name="res_conv")
    res_shr = te.compute(output_shape, lambda *i: res_conv(*i) >> 8, name="res_shr")
    res_max = te.compute(output_shape, lambda *i: te.max(res_shr(*i), 0), "res_max")
    clip = (1 << (env.INP_WIDTH - 1)) - 1
    res_min = te.compute(output_shape, lambda *i: te.min(res_max(*i), clip), "res_min")
    res = te.compute(output_shape, lambda *i: res_min(*i).astype(env.inp_dtype), name="res")
    s = te.create_schedule(res.op)
    b, oc, y, x, b_tns, oc_tns = s[res].op.axis
    oc_out, oc_inn = s[res].split(oc, factor=oc_block)
    y_out, y_inn = s[res].split(y, factor=h_block)
    x_out, x_inn = s[res].split(x, factor=w_block)
    s[res].reorder(b, oc_out, y_out, x_out, oc_inn, y_inn, x_inn, b_tns, oc_tns)
    for stage in (res_conv, res_shr, res_max, res_min):
        s[stage].compute_at(s[res], x_out)
    b_inn, oc_inn2, y_inn2, x_inn2, b_tns2, oc_tns2 = s[res_conv].op.axis
    ic_out, ic_inn = s[res_conv].split(ic, factor=ic_block)
    s[res_conv].reorder(ic_out, b_inn, oc_inn2, y_inn2, ic_inn, dy, dx, x_inn2, b_tns2,
                        oc_tns2, ic_tns)
    if vthreads > 1:
        _, tx = s[res].split(oc_out, factor=vthreads)
        s[res].reorder(tx, b)
        s[res].bind(tx, te.thread_axis("cthread"))
    s[data_buf].set_scope(env.inp_scope)
    s[kernel_buf].set_scope(env.wgt_scope)
    for stage in (res_conv, res_shr, res_max, res_min):
        s[stage].set_scope(env.acc_scope)
    s[data_buf].compute_at(s[res_conv], ic_out)
    s[kernel_buf].compute_at(s[res_conv], ic_out)
    s[data_buf].pragma(s[data_buf].op.axis[0], env.dma_copy)
    s[kernel_buf].pragma(s[kernel_buf].op.axis[0], env.dma_copy)
    s[res_conv].tensorize(b_tns2, env.gemm)
    for stage in (res_shr, res_max, res_min):
        s[stage].pragma(s[stage].op.axis[0], env.alu)
    s[res].pragma(oc_inn, env.dma_copy)
    return s, [data, weight, res]


def conv2d_reference(env, data, weight, pad=1, stride=1):
    """int8 NCHW1n16c conv2d -> int32 -> >> 8 -> clip(0, 127) -> int8, with numpy."""
    n, ci, h, w, bn, bi = data.shape
    co, _, kh, kw, bo, _ = weight.shape
    x = data.transpose(0, 4, 1, 5, 2, 3).reshape(n * bn, ci * bi, h, w).astype(np.int32)
    k = weight.transpose(0, 4, 1, 5, 2, 3).reshape(co * bo, ci * bi, kh, kw).astype(np.int32)
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], k.shape[0], oh, ow), np.int64)
    for dy in range(kh):
        for dx in range(kw):
            patch = x[:, :, dy:dy + stride * oh:stride, dx:dx + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, k[:, :, dy, dx])
    out = np.clip(out.astype(np.int32) >> 8, 0, 127).astype(np.int8)
    return out.reshape(n, bn, co, bo, oh, ow).transpose(0, 2, 4, 5, 1, 3)
