"""The JSON Schemas eagleconv publishes (``schemas/``, ``eagleconv schema``): each model named where it is defined.

The config models type-check what a file states (a flag must be a boolean,
a size a positive integer) but default nothing: absence is reported by the
layout reader, which knows which absences engines fill in silently.  They
allow unknown keys because Hugging Face configs carry many.  They live with
what they describe (an architecture's config in its module, the speculators
config beside its layout); :data:`PUBLISHED` names each, and importing this
module imports none of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

PUBLISHED: dict[str, str] = {
    "drafter-spec": "eagleconv.spec.drafter:DrafterSpec",
    "config-llama-eagle3": "eagleconv.architectures.llama:LlamaEagle3Config",
    "config-deepseek-mla-eagle3": "eagleconv.architectures.deepseek_mla:DeepseekMlaEagle3Config",
    "config-speculators-eagle3": "eagleconv.formats.base.speculators_config:SpeculatorsEagle3Config",
    "report-inspect": "eagleconv.spec.report:InspectReport",
    "report-convert": "eagleconv.spec.report:ConvertReport",
    "report-validate": "eagleconv.spec.report:ValidationReport",
    "report-transform": "eagleconv.spec.report:TransformReport",
    "report-push": "eagleconv.hub:PushReport",
    "report-pull": "eagleconv.hub:PullReport",
    "report-diff": "eagleconv.spec.report:DiffReport",
    "report-simulate": "eagleconv.simulation:SimulateReport",
    "report-measure": "eagleconv.measurement:MeasureReport",
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


__all__ = ["PUBLISHED", "json_schemas", "write_schemas"]
