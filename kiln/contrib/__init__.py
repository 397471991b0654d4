"""Extra modules built on kiln's public API (``tvm.contrib`` under the alias).

Nothing is imported eagerly: ``from kiln.contrib import d2ltvm`` loads the book's helpers
(:mod:`kiln.contrib.d2ltvm`) only when asked for.
"""
