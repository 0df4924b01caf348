"""The typed reports returned by the library and printed by ``--json``.

The CLI renders these models; it never builds its own dictionaries, so the
JSON a pipeline reads is exactly what ``eagleconv.inspect()`` / ``convert()`` /
``validate()`` return.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticSerializationError

from .drafter import DrafterSpec

Severity = Literal["error", "warning", "info"]
# What an engine does because of a finding, stated where the finding is made (never read back from its text):
# load_fails (it refuses the checkpoint, or its first request fails), runs_differently (it loads and computes
# other than the checkpoint means), unverified (it guesses a value the checkpoint does not state: whether the guess
# is what the drafter was trained with cannot be read from the checkpoint), ignored (it drops a tensor or a field,
# or uses the target's copy), none (it behaves as intended; the finding is a note).
Effect = Literal["load_fails", "runs_differently", "unverified", "ignored", "none"]
Runner = Literal["V1", "V2"]  # vLLM's two model runners, where only one of them does what a finding says


class _Report(BaseModel):
    # Built on first use: keeps `eagleconv --help` and `inspect` start-up fast.
    model_config = ConfigDict(defer_build=True)

    def model_dump_json(self, **kwargs: Any) -> str:
        """JSON as pydantic writes it; a path that is not UTF-8 (a lone surrogate, which UTF-8 cannot encode)
        is written backslash-escaped (``out\\xff``) instead of failing the whole report."""
        try:
            return super().model_dump_json(**kwargs)
        except PydanticSerializationError:
            import json

            from .._text import without_surrogates

            indent = kwargs.pop("indent", None)
            kwargs.pop("ensure_ascii", None)
            data = without_surrogates(self.model_dump(mode="json", **kwargs))
            return json.dumps(data, indent=indent, ensure_ascii=False)


class Finding(_Report):
    """One problem or observation, with a stable code (see the findings reference)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    code: str
    severity: Severity
    message: str
    tensor: str | None = None
    engine: str | None = None
    effect: Effect | None = Field(default=None, description=(
        "what the engine (or, without one, every engine building from the config) does because of this: load_fails, "
        "runs_differently, unverified (guesses a value the checkpoint does not state), ignored (drops it, or uses "
        "the target's copy), none (a note); null: not stated"))
    runner: Runner | None = Field(default=None, description="the vLLM model runner this is about, where only one is")


class TensorRow(_Report):
    name: str
    shape: list[int]
    dtype: str
    bytes: int
    file: str | None = None


class VocabSummary(_Report):
    target_vocab_size: int
    draft_vocab_size: int
    compressed: bool
    d2t: bool = Field(description="d2t tensor present")
    t2d: bool = Field(description="t2d tensor present")


class FlagsView(_Report):
    fc_norm: bool
    norm_before_fc: bool
    norm_output: bool
    norm_before_residual: bool
    use_aux_hidden_state: bool


class HubSource(_Report):
    """Where a header-only ``hf://`` report was read from, and what reading it cost."""

    repo_id: str
    revision: str | None = Field(description="the revision asked for (None: main)")
    commit: str = Field(description="the commit every file was read at")
    header_only: bool = Field(True, description="config, index and safetensors headers only (no --download)")
    bytes_transferred: int = Field(description="the bytes of every answer: repository info, config.json, the index, "
                                   "the headers and the small vectors (d2t, t2d)")
    requests: int


class InspectReport(_Report):
    path: str
    format: str
    detected_by: list[str]
    eagle_version: Literal["3", "3.1"]
    eagle31_flags: list[str]
    architecture: str
    flags: FlagsView
    aux_layer_ids: list[int] | None
    aux_layer_convention: str | None
    aux_layer_ids_hidden_state_index: list[int] | None = Field(
        None, description="the same ids in vLLM's numbering (hidden state entering layer i)"
    )
    num_aux_hidden_states: int
    vocab: VocabSummary
    weights: str
    files: list[str]
    total_bytes: int
    tensors: list[TensorRow]
    notes: list[str]
    spec: DrafterSpec
    hub: HubSource | None = Field(None, description="hf:// read from its headers: the commit and the bytes transferred")


class StepDivergence(_Report):
    """One draft step compared between two drafters on identical inputs (``diff``, lossy upgrade/downgrade)."""

    step: int = Field(..., ge=1, description="1 = the first pass (every scheduled row), k >= 2 = the k-th recursion step")
    top1_agreement: float = Field(..., ge=0, le=1, description="fraction of rows whose argmax (draft token) agrees")
    max_abs_err: float = Field(..., ge=0, description="max |logit a - logit b| over target-vocabulary entries finite "
                                                      "in both")
    max_rel_err: float = Field(..., ge=0, description="max_abs_err / max |logit a|")


class PlanRow(_Report):
    source: str | None
    destination: str | None
    shape: list[int]
    dtype: str
    action: Literal["copy", "derive", "computed", "drop"] = Field(
        ..., description="copy: bytes copied unchanged; derive: exactly re-derived (t2d from d2t); "
                         "computed: new values built in memory by a transform; drop: not written")
    reason: str | None = None


class ConvertReport(_Report):
    ok: bool
    source: str
    destination: str
    source_format: str
    destination_format: str
    dry_run: bool
    plan: list[PlanRow]
    config_changes: list[str] = Field(default_factory=list, description="config fields dropped, renamed or rewritten")
    notes: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    files_written: list[str] = Field(default_factory=list)
    bytes_written: int = 0
    exact: bool = Field(True, description="the output computes exactly what the input did (layout changes, exact folds)")
    divergence: list[StepDivergence] = Field(default_factory=list, description="measured per draft step when not exact")

    @property
    def dropped(self) -> list[PlanRow]:
        return [row for row in self.plan if row.action == "drop"]


class TransformChange(_Report):
    change: str
    exact: bool = Field(..., description="true when this step leaves what the drafter computes unchanged (up to one "
                                         "rounding of the folded weights)")


class RefitRow(_Report):
    """One least-squares refit an upgrade made so the new norms keep what the source computed."""

    tensors: list[str] = Field(description="the tensors the refit rewrote")
    fitted: str = Field(description="what the refitted weights reproduce")
    tokens: int = Field(..., ge=1, description="calibration tokens the fit used")
    residual_before: float = Field(..., ge=0, description="mean over tokens of ||new - old||^2 / ||old||^2 "
                                                        "with the norms alone")
    residual_after: float = Field(..., ge=0, description="the same after the refit")
    residual_held_out: float | None = Field(None, ge=0, description="the same for a fit without every 5th token, "
                                            "measured on those (None: too few tokens to hold any out)")


class TransformReport(ConvertReport):
    """What ``eagleconv upgrade`` / ``downgrade`` (and ``eagleconv.upgrade()`` / ``downgrade()``) return.

    ``exact`` / ``divergence`` (inherited) describe the written drafter against
    the source; for an upgrade ``divergence_unit_weights`` is the same measure
    with the new norms at weight 1.0, so the report shows what calibration bought.
    """

    operation: Literal["upgrade", "downgrade"]
    style: Literal["fc_norm", "norm_before_fc"] | None = None
    flags_before: FlagsView
    flags_after: FlagsView
    eagle_version_before: Literal["3", "3.1"]
    eagle_version_after: Literal["3", "3.1"]
    changes: list[TransformChange] = Field(default_factory=list)
    initialisation: Literal["calibrated", "unit"] | None = Field(
        None, description="how new norm weights were set: scale-preserving from captured aux states, or 1.0")
    calibration: str | None = Field(None, description="where the captured aux states came from")
    refits: list[RefitRow] = Field(default_factory=list, description="weights refitted to the new norms on the "
                                   "calibration tokens, with the fit residual")
    divergence_unit_weights: list[StepDivergence] = Field(default_factory=list)
    compute_dtype: str | None = Field(None, description="dtype the divergence was measured in (None: not measured)")
    output_dtype: str | None = Field(None, description="dtype of the written weights")


DiffStep = StepDivergence  # one draft step compared between two runs on identical inputs


class DiffReport(_Report):
    """What ``eagleconv diff A B --json`` and ``eagleconv.diff()`` return."""

    identical: bool = Field(description="same draft tokens and bit-identical logits at every step")
    steps: list[DiffStep]
    a: str
    b: str
    compute_dtype: str
    output_dtype: str
    inputs: str = Field(description="where the inputs came from (synthetic seed or target)")
    notes: list[str] = Field(default_factory=list)


class ForwardStep(_Report):
    """One draft step of ``validate --forward``."""

    step: int
    tokens: list[int] = Field(description="the draft token (target vocabulary id) of each sequence")
    feedback_rms: float = Field(description="RMS of the hidden state fed to the next step (the drift signal)")
    finite: bool


class EngineForward(_Report):
    """The drafter run as one engine release will read it, against the checkpoint's intended math."""

    engine: str
    runs: bool = Field(description="false when the engine would not load or run this checkpoint")
    reason: str | None = None
    flags: dict[str, bool] = Field(default_factory=dict, description="flags as the engine resolves them")
    aux_layer_ids: list[int] | None = Field(None, description="target layers the engine captures (hidden_state_index)")
    differs: list[str] = Field(default_factory=list, description="what differs from the intended drafter")
    steps: list[DiffStep] = Field(default_factory=list)


class ForwardReport(_Report):
    """``validate --forward``: K draft steps of the reference forward (vLLM's math)."""

    path: str
    architecture: str
    eagle_version: str
    compute_dtype: str
    output_dtype: str
    recipe: str = Field(description="RMSNorm rounding recipe: native (vLLM IR) or one_round (vllm_c CUDA)")
    backend: str
    inputs: str
    aux_layer_ids: list[int]
    steps: list[ForwardStep]
    borrowed: list[str] = Field(default_factory=list, description="embedding / LM head rows that were synthetic")
    notes: list[str] = Field(default_factory=list)
    engines: list[EngineForward] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    device: str = Field("cpu", description="where the forward ran (cpu, cuda)")
    kernels: str | None = Field(None, description="--backend triton: how the kernels ran (triton, or interpreter on CPU)")
    against_torch: list[DiffStep] = Field(
        default_factory=list, description="a backend other than torch: per step, its logits against the torch backend's "
        "on the same inputs and device")


class ValidationReport(_Report):
    """What ``eagleconv validate`` / ``lint`` / ``eagleconv.validate()`` return."""

    ok: bool = Field(description="true when no finding has severity 'error'")
    path: str | None = None
    format: str | None = None
    eagle_version: Literal["3", "3.1"] | None = None
    architecture: str | None = Field(None, description="a registered drafter architecture (the name of one of eagleconv.architectures)")
    flags: FlagsView | None = None
    aux_layer_ids: list[int] | None = Field(None, description="as the checkpoint states them")
    aux_layer_convention: str | None = None
    engines: list[str] = Field(default_factory=list, description="engine profiles checked, e.g. 'vllm 0.32'")
    numeric_scan: bool = False
    findings: list[Finding] = Field(default_factory=list)
    detected_by: list[str] = Field(default_factory=list, description="why this layout was chosen")
    target: str | None = Field(None, description="the target model config checked against (--target)")
    tp: int | None = Field(None, description="tensor-parallel size checked (--tp)")
    ignored: list[Finding] = Field(default_factory=list,
                                   description="warnings and infos the caller judged acceptable (--ignore CODE)")
    forward: ForwardReport | None = Field(None, description="validate --forward: the drafter run for K draft steps")
    hub: HubSource | None = Field(None, description="hf:// read from its headers: the commit and the bytes transferred")


class ErrorReport(_Report):
    """What a command prints on stdout under ``--json`` when it fails, instead of its report (stderr has the line)."""

    ok: Literal[False]
    error: str = Field(description="the one-line message printed on stderr, naming the file and the problem")
    code: str | None = Field(description="the finding code (ECnnn) when the failure is a finding, else null")
    exit_code: int = Field(description="the process's exit code: 1 for a finding, 2 for bad usage or unreadable or "
                                       "unsafe input or an internal error")
