"""``eagleconv measure``: a served drafter's acceptance, read from the engine's own counters (vLLM's /metrics,
llama-server's /metrics or reply timings), in simulate's report terms; no torch.

``servers`` holds one small table per engine, ``client`` the HTTP (requests) and the Prometheus parsing
(prometheus_client), ``run`` the measuring loop, ``against`` the comparison with a simulate or measure report.
"""

from __future__ import annotations

from .client import MeasureError
from .report import AL_DEFINITION, Comparison, MeasureReport, PromptMeasure
from .run import measure, prompts_sha256, read_prompts

__all__ = ["AL_DEFINITION", "Comparison", "MeasureError", "MeasureReport", "PromptMeasure", "measure",
           "prompts_sha256", "read_prompts"]
