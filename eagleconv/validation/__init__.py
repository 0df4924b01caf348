"""Checks on drafter checkpoints and configs, reported as findings with stable codes."""

from .api import lint, validate
from .codes import CODES, Code
from .structural import checkpoint_findings

__all__ = ["CODES", "Code", "checkpoint_findings", "lint", "validate"]
