"""The config model of vLLM speculators' format: the one layout whose config.json has a schema of its own.

Apart from the layout (issue 26) so that reading a config (:func:`eagleconv.formats.base.reading.config_model_for`)
can check it against this schema without importing the layout module, which registers itself through the
package and so would close an import cycle.  Under ``base/`` because every module of ``formats/`` is a layout.
"""

from __future__ import annotations

from pydantic import Field, PositiveInt

from ...architectures.llama import LlamaDecoderFields
from ...config.config_fields import _Config, _Eagle3Fields


class SpeculatorsVerifier(_Config):
    name_or_path: str | None = None
    architectures: list[str] = Field(default_factory=list)


class SpeculatorsProposal(_Config):
    proposal_type: str
    speculative_tokens: PositiveInt | None = None


class SpeculatorsConfigBlock(_Config):
    algorithm: str
    proposal_methods: list[SpeculatorsProposal] = Field(default_factory=list)
    default_proposal_method: str | None = None
    verifier: SpeculatorsVerifier | None = None


class SpeculatorsEagle3Config(_Eagle3Fields):
    """vLLM speculators format: ``speculators_model_type: eagle3`` with a nested transformer_layer_config."""

    architectures: list[str] | None = None
    speculators_model_type: str
    speculators_version: str | None = None
    speculators_config: SpeculatorsConfigBlock | None = None
    transformer_layer_config: LlamaDecoderFields  # always a LlamaConfig
