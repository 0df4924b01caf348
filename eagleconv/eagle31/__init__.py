"""EAGLE-3 <-> EAGLE-3.1: the maths (``transforms``: functions of tensors and the plans built from them) and its
runs (``api``: ``upgrade`` and ``downgrade``, the calibration, the divergence measurement, the writer, the report).
"""
