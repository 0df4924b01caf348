"""From files to the canonical description: a checkpoint through its layout (``loading``, ``inspection``),
the calibration file (``calibration``), and the config models and JSON Schemas eagleconv publishes (``schemas``).

Above the layouts (:mod:`eagleconv.formats`), below the engines and the forward that start from a loaded drafter.
"""
