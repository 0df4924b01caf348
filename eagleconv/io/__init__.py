"""Safe checkpoint I/O: strict safetensors headers, lazy reads, atomic streaming writes.

Submodules are imported directly (``eagleconv.io.reader``, ``eagleconv.io.writer``)
so that header-only commands do not pay for the writer.
"""
