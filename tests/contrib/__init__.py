"""Tests of kiln.contrib (tvm.contrib): cc, clang, nvcc, download, utils."""
