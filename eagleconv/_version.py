"""The package version, in one place: pyproject.toml reads it (``[tool.setuptools.dynamic]``), and so do
``eagleconv.__version__``, ``eagleconv --version``, the conversion provenance and the model card."""

__version__ = "0.1.0"
