"""Pydantic models of the config.json files drafters ship, and the JSON Schemas eagleconv publishes.

The config models type-check what a file states (a flag must be a boolean,
a size a positive integer) but default nothing: absence is reported by the
layout reader, which knows which absences engines fill in silently.  They
allow unknown keys because Hugging Face configs carry many.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..config.config_fields import EagleConfigBlock, _Config, _DecoderFields, _Eagle3Fields  # noqa: F401 - re-exported (their old home)
from ..spec.drafter import DrafterSpec
from ..formats.base.reading import config_model_for


def __getattr__(name: str) -> Any:
    """The per-architecture config models live in their architecture modules; found here too."""
    if name == "LlamaEagle3Config":
        from ..architectures.llama import LlamaEagle3Config

        return LlamaEagle3Config
    if name == "DeepseekMlaEagle3Config":
        from ..architectures.deepseek_mla import DeepseekMlaEagle3Config

        return DeepseekMlaEagle3Config
    if name == "SpeculatorsEagle3Config":
        from ..formats.speculators import SpeculatorsEagle3Config

        return SpeculatorsEagle3Config
    raise AttributeError(name)


PUBLISHED: dict[str, str] = {
    "drafter-spec": "eagleconv.spec.drafter:DrafterSpec",
    "config-llama-eagle3": "eagleconv.architectures.llama:LlamaEagle3Config",
    "config-deepseek-mla-eagle3": "eagleconv.architectures.deepseek_mla:DeepseekMlaEagle3Config",
    "config-speculators-eagle3": "eagleconv.formats.speculators:SpeculatorsEagle3Config",
    "report-inspect": "eagleconv.spec.report:InspectReport",
    "report-convert": "eagleconv.spec.report:ConvertReport",
    "report-validate": "eagleconv.spec.report:ValidationReport",
    "report-transform": "eagleconv.spec.report:TransformReport",
    "report-push": "eagleconv.hub:PushReport",
    "report-pull": "eagleconv.hub:PullReport",
    "report-diff": "eagleconv.spec.report:DiffReport",
    "report-simulate": "eagleconv.simulate:SimulateReport",
    "report-measure": "eagleconv.measure:MeasureReport",
    "audit-row": "eagleconv.hub:AuditRow",
    "report-audit": "eagleconv.hub:AuditSummary",
    "error": "eagleconv.spec.report:ErrorReport",
}


def json_schemas() -> dict[str, str]:
    """File name -> JSON Schema text for everything eagleconv publishes in schemas/."""
    from importlib import import_module

    out = {}
    for stem, target in PUBLISHED.items():
        module, _, attr = target.partition(":")
        model: type[BaseModel] = getattr(import_module(module), attr)
        out[f"{stem}.schema.json"] = json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"
    return out


def write_schemas(directory: str | Path) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in json_schemas().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


# The three config models are served by __getattr__ above, so importing schemas does not import the architectures.
__all__ = ["DeepseekMlaEagle3Config", "DrafterSpec", "EagleConfigBlock", "LlamaEagle3Config",  # noqa: F822
           "SpeculatorsEagle3Config", "config_model_for", "json_schemas", "write_schemas"]
