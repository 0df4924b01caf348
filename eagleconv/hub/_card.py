"""The model card and the pre-upload publish checks (EC080): what a pushed drafter says about itself."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .._version import __version__
from ..spec.drafter import EagleFlags
from ..engines import resolve_engines
from ..errors import UsageError
from ..io.hub_paths import is_local_path
from ..spec.report import Finding, ValidationReport
from ..hubread.base import MANIFEST, ManifestEntry
from ._base import LIBRARY, LICENSE
from ._evaluation import Acceptance, card_sections, engine_matrix, eval_results

if TYPE_CHECKING:
    from ..spec.report import InspectReport


def verifier_of(config: Mapping[str, object], inspected: InspectReport | None) -> str | None:
    """The target model the config names, if any (speculators' verifier.name_or_path)."""
    if inspected is not None and inspected.spec.verifier is not None and inspected.spec.verifier.name_or_path:
        return inspected.spec.verifier.name_or_path
    sc = config.get("speculators_config")
    verifier = sc.get("verifier") if isinstance(sc, dict) else None
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    return name if isinstance(name, str) and name else None


# Config keys (at any depth) that name the target model; speculators' verifier.name_or_path is read via the spec.
TARGET_KEYS = ("base_model", "base_model_name_or_path", "target_model", "target_model_name_or_path",
               "target_model_path", "verifier_name_or_path")


def _target_fields(value: object, where: str = "") -> Iterable[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            at = f"{where}.{key}" if where else str(key)
            if key in TARGET_KEYS and isinstance(item, str):
                yield at, item
            else:
                yield from _target_fields(item, at)


def publish_findings(config: Mapping[str, object], inspected: InspectReport | None) -> list[Finding]:
    """Checks that matter only for a config about to be published: a target model named by a local path (EC080)."""
    named: dict[str, str] = {}
    verifier = verifier_of(config, inspected)
    if verifier is not None:
        named["speculators_config.verifier.name_or_path"] = verifier
    named.update(_target_fields(config))
    verifier_key = "speculators_config.verifier.name_or_path"
    fix = {verifier_key: "rewrite it with `eagleconv convert PATH OUT --to speculators --verifier ORG/NAME` and "
                         "push OUT"}
    return [Finding(code="EC080", severity="warning",
                    message=f"{key} is the local path {name!r}: publishing leaks it and nobody can resolve the target "
                            f"from it; push refuses it: {fix.get(key, 'set it to the Hub id ORG/NAME')} "
                            "(--ignore EC080 publishes it anyway)")
            for key, name in named.items() if is_local_path(name)]


def speculative_tokens(config: Mapping[str, object]) -> int:
    """The number of draft tokens the trainer recorded (speculators' proposal method), else vLLM's common 3."""
    sc = config.get("speculators_config")
    methods = sc.get("proposal_methods") if isinstance(sc, dict) else None
    if isinstance(methods, list) and methods and isinstance(methods[0], dict):
        k = methods[0].get("speculative_tokens")
        if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
            return k
    return 3


def serve_command(target: str | None, repo_id: str, k: int) -> str:
    spec = json.dumps({"model": repo_id, "method": "eagle3", "num_speculative_tokens": k})
    return f"vllm serve {target or 'TARGET_MODEL'} --speculative-config '{spec}'"


def model_card(repo_id: str, inspected: InspectReport, validation: ValidationReport, base_model: str | None,
               command: str, files: Sequence[ManifestEntry], license_id: str = LICENSE,
               acceptance: Acceptance | None = None) -> str:
    """A README.md with metadata (license, library_name, base_model, tags, the engine matrix and, given
    ``acceptance``, its model-index evaluation results) and what a user needs to serve the drafter.

    The metadata goes through huggingface_hub's ModelCardData/ModelCard, which write and re-parse the YAML.
    """
    from huggingface_hub import ModelCard, ModelCardData


    spec = inspected.spec
    tags = ["eagle3", *(["eagle3.1"] if spec.eagle_version == "3.1" else []), "speculative-decoding", "eagleconv"]
    name = repo_id.split("/")[-1]
    matrix = engine_matrix(validation)
    data = ModelCardData(license=license_id, library_name=LIBRARY, base_model=base_model or None, tags=tags,
                         model_name=name if acceptance is not None else None,
                         eval_results=eval_results(acceptance) if acceptance is not None else None,
                         eagleconv={"engines": [e.model_dump() for e in matrix]})
    front = ["---", data.to_yaml(), "---", ""]
    version = "EAGLE-3.1" if spec.eagle_version == "3.1" else "EAGLE-3"
    target = f"[{base_model}](https://huggingface.co/{base_model})" if base_model else "its target model (not recorded)"
    body = [f"# {name}", "",
            f"An {version} speculative-decoding drafter ({spec.architecture}) for {target}, "
            f"published and validated by eagleconv {__version__}.", "",
            "## Serve with vLLM", "", "```bash", command, "```", ""]
    if not base_model:
        body += ["Replace `TARGET_MODEL` with the model this drafter was trained against.", ""]
    heads = f"{spec.num_attention_heads}" + (f" (KV heads {spec.num_key_value_heads})" if spec.num_key_value_heads else "")
    rows = [("layout", inspected.format), ("architecture", f"{spec.architecture} (model_type {spec.model_type})"),
            ("decoder layers", str(spec.num_hidden_layers)), ("hidden size", str(spec.hidden_size)),
            ("target hidden size", str(spec.target_hidden_size)), ("attention heads", heads),
            ("head dim", str(spec.head_dim) if spec.head_dim else "MLA"),
            ("intermediate size", str(spec.intermediate_size)), ("dtype", spec.dtype or "unknown"),
            ("rms_norm_eps", str(spec.rms_norm_eps) if spec.rms_norm_eps is not None else "not stated"),
            ("rope", f"theta {spec.rope.theta if spec.rope.theta is not None else 'not stated'}, "
                     f"scaling {spec.rope.scaling}" + (f" x{spec.rope.factor}" if spec.rope.factor else "")),
            ("weights", f"{inspected.weights}, {inspected.total_bytes} bytes")]
    body += ["## Architecture", "", "| field | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    body += ["## Flags", "", "| flag | value | meaning |", "|---|---|---|"]
    for flag, value in spec.flags.model_dump().items():
        body.append(f"| `{flag}` | {str(value).lower()} | {EagleFlags.model_fields[flag].description} |")
    body.append("")
    hsi = inspected.aux_layer_ids_hidden_state_index
    body += ["## Aux layers", "",
             f"The drafter reads {spec.aux.count} hidden states of the target."]
    if spec.aux.ids is None:
        body.append("The checkpoint does not record which layers: engines guess (vLLM: (2, L//2, L-3)).")
    else:
        body.append(f"Layer ids as the checkpoint states them: `{list(spec.aux.ids)}` in the `{spec.aux.convention}` "
                    "convention" + (f"; in vLLM's numbering (the hidden state entering layer i): `{list(hsi)}`."
                                     if hsi is not None else "."))
    body += ["", "## Vocabulary", "",
             f"Target vocabulary {spec.vocab_size}, draft vocabulary {spec.draft_vocab_size}" +
             (" (compressed: `d2t[i]` is the offset from draft id i to its target id)" if spec.compressed_vocab
              else " (not compressed)") +
             f"; d2t {'present' if inspected.vocab.d2t else 'absent'}, t2d {'present' if inspected.vocab.t2d else 'absent'}.",
             "", "## Validation", "",
             f"Validated by eagleconv {__version__} for: {', '.join(validation.engines)}"
             + ("" if validation.numeric_scan else " (no numeric scan)") + ".", ""]
    if validation.findings:
        body += ["| severity | code | engine | finding |", "|---|---|---|---|"]
        body += [f"| {f.severity} | {f.code} | {f.engine or '-'} | {f.message.replace('|', '/')} |"
                 for f in validation.findings]
    else:
        body.append("No findings.")
    if validation.ignored:
        body += ["", "Judged acceptable by the publisher (ignored): " +
                 ", ".join(sorted({f.code for f in validation.ignored})) + "."]
    body += ["", *card_sections(matrix, acceptance)]
    body += ["## Files", "", f"`{MANIFEST}` lists the size and sha256 of every file.", "",
             "| file | bytes | sha256 |", "|---|---|---|", *(f"| {e.path} | {e.size} | `{e.sha256}` |" for e in files), ""]
    try:
        card = ModelCard("\n".join(front + body))  # parses the front matter back: what the Hub will read
    except ValueError as exc:
        raise UsageError(f"the model card metadata is invalid: {str(exc).splitlines()[0]}") from None
    return str(card)


def served_as(repo_id: str, engines: Iterable[str] | str) -> list[Finding]:
    """EC041 for the name users will serve: the repo id, not the local directory validate saw.

    The engines' own method-detection rules run on ``repo_id`` (they read only the path).
    """
    from types import SimpleNamespace


    out: list[Finding] = []
    for profile in resolve_engines(engines):
        for check in profile.checks:
            if "EC041" in getattr(check, "codes", ()):
                out += check(SimpleNamespace(path=repo_id), SimpleNamespace(profile=profile))
    return out
