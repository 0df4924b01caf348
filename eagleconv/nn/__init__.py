"""Tensor math shared by the architectures and the reference forward: a leaf that imports only torch.

``attention`` (causal attention over a KV cache) and ``norm`` (the RMSNorm
recipes) are what an architecture module's layer is written in; rotary
embeddings are :mod:`eagleconv.rope.rotary`.  Nothing here knows a checkpoint,
a layout or an architecture, so ``architectures`` and ``forward`` both import
it without importing each other.
"""
