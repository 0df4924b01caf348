"""``eagleconv simulate``: greedy speculative decoding offline, counted the way the engine counts it.

The target runs in transformers, or (``--target-runtime auto``, the default, for a Llama, Qwen3 or DeepSeek-V3
target whose every config field and tensor eagleconv understands) in eagleconv's own forward of the same math,
checked against transformers and vLLM.  The engine's profile names its decode loop (``EngineProfile.decode_loop``), a module
beside this one run over simulate's one decode loop (``loop.py``): vLLM's proposer (``vllm.py``), llama-server's
and llama-speculative-simple's (``llamacpp.py``), or a plugin's own module.

The generated tokens are the target's plain greedy output whatever the drafter does; only the counters and the
drafted tokens depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .drafter import EngineDrafter, engine_drafter, simulated_engines
from .loop import Job
from .report import SimulateError, SimulateReport, accept_greedy
from .vllm import propose

if TYPE_CHECKING:
    from ..engines.base import EngineProfile
    from ..forward.protocols import TargetModel
    from ..forward.run import StepProgress

DEFAULT_PROMPTS: tuple[tuple[int, ...], ...] = ((1, 17, 42, 99, 7, 300), (1, 5, 5, 64, 128), (1, 250, 3, 77, 31, 2, 9),
                                                (1, 400, 401, 402))


def _target(target: str | Path, runtime: str) -> TargetModel:
    from ..forward.native_target import open_target

    path = Path(target)
    if not (path / "config.json").is_file():
        raise SimulateError(f"{path}: no config.json (--target takes a Hugging Face model directory)", code=None)
    return open_target(path, runtime)


def available_threads() -> int:
    """The cores this process may run on (its CPU affinity, as a container or ``taskset`` limits it): --threads' cap."""
    from ..support._process import usable_cores

    return usable_cores()


def simulate(drafter: str | Path, target: str | Path, prompts: Sequence[Sequence[int]] | str | Path | None = None,
             *, num_speculative_tokens: int = 3, max_tokens: int = 32, engine: str = "vllm:0.32",
             target_runtime: str = "auto", progress: StepProgress | None = None, threads: int | None = None,
             device: str = "cpu", kv_cache: bool = True, p_min: float = 0.0,
             llamacpp_loop: str = "server") -> SimulateReport:
    """Greedy speculative decoding of ``prompts`` with ``target`` verifying ``drafter``'s proposals, as vLLM runs it.

    ``prompts``: token-id lists, a JSON file of them (read by ``forward.inputs.read_prompts``, as every
    ``--prompts`` is), or None for four built-in ones; either way checked by the same rules, the vocabulary
    once the target is loaded.  ``target_runtime``: ``auto`` runs a Llama/Qwen3 target through eagleconv's own
    forward when it understands every config field and tensor (no transformers import: most of simulate's time
    otherwise), else transformers; ``transformers`` or ``eagleconv`` force one (forward.native_target.open_target).
    ``progress(what, done, total)``: told of the loading, then of the tokens generated of all prompts' max_tokens.
    ``threads``: torch's intra-op threads, 1 to the cores this process may use (default: those cores that other
    processes leave idle, measured while torch loads: _process.default_threads).  ``device``: where the
    target and drafter run (``cuda`` needs eagleconv's runtime and a CUDA device).  ``kv_cache`` (eagleconv's
    runtime only, either engine): keys and values kept across rounds and all prompts verified in one pass per
    step (forward.kv_cache); False re-runs everything each round, prompt by prompt (the reference the tests
    compare it with; the transformers runtime always runs that way).  ``p_min`` (``--engine llama.cpp`` only):
    llama.cpp's ``--spec-draft-p-min`` early stop (eagleconv.simulation.llamacpp).  ``llamacpp_loop``
    (``--engine llama.cpp`` only): ``server``, llama-server's slot loop (what is deployed), or ``simple``,
    llama-speculative-simple's (the parity tier's reference); their differences: eagleconv.simulation.llamacpp.
    """
    from ..support import _process
    from ..support._extras import need

    if threads is not None and not 1 <= threads <= available_threads():
        raise SimulateError(f"--threads {threads}: give 1 to {available_threads()} (the CPUs this process may use; "
                            "more threads than CPUs only wait for each other)", code=None)
    before_import = _process.cpu_sample()  # the window for others' CPU use: torch's import, reading the prompts
    need("torch", "simulate")
    import torch

    from ..forward.inputs import check_prompts, read_prompts

    if num_speculative_tokens < 1 or max_tokens < 1:
        raise SimulateError("--num-speculative-tokens and --max-tokens must be at least 1", code=None)
    from ..support.bounds import check_decode_arguments

    check_decode_arguments(max_tokens, num_speculative_tokens)
    if device != "cpu":
        if not device.startswith("cuda"):
            raise SimulateError(f"--device {device}: simulate runs on cpu or cuda", code=None)
        if not torch.cuda.is_available():
            raise SimulateError(f"--device {device}: torch {torch.__version__} sees no CUDA device here", code=None)
        if target_runtime == "transformers":
            raise SimulateError(f"--device {device} runs the target in eagleconv's runtime, not transformers",
                                code=None)
    source = Path(prompts) if isinstance(prompts, str | Path) else None
    given = read_prompts(source) if source is not None else check_prompts(
        prompts if prompts is not None else DEFAULT_PROMPTS)  # before the target loads: a bad file fails at once
    before, note = torch.get_num_threads(), None
    if threads is None:
        threads, others = _process.default_threads(before_import)
        if threads < available_threads() and others is not None:
            note = (f"{threads} of {available_threads()} CPU threads: other processes kept {others:.1f} cores busy "
                    "while torch loaded (--threads N to choose)")
    torch.set_num_threads(threads)
    try:
        report = _simulate(drafter, target, given, source, num_speculative_tokens, max_tokens, engine,
                           "eagleconv" if device != "cpu" else target_runtime,
                           progress or (lambda what, done, total: None), device, kv_cache, p_min, llamacpp_loop)
    finally:
        torch.set_num_threads(before)
    if note is not None:
        report.notes.append(note)
    return report


def decode_loop(profile: EngineProfile) -> Callable[[Job], SimulateReport]:
    """The loop ``profile.decode_loop`` names: a module of this package (``vllm``, ``llamacpp``) or a dotted module
    path (a plugin's), whose ``simulate_loop`` runs every prompt; a SimulateError for an engine with none."""
    if profile.decode_loop is None or profile.serve is None:
        raise SimulateError(f"simulate runs the engines whose profile names a decode loop ({simulated_engines()}), "
                            f"not {profile.label}", code=None)
    name = profile.decode_loop
    module = import_module(name if "." in name else f"{__name__}.{name}")
    return cast("Callable[[Job], SimulateReport]", module.simulate_loop)


def _simulate(drafter: str | Path, target: str | Path, prompts: list[list[int]], source: Path | None,
              num_speculative_tokens: int, max_tokens: int, engine: str, target_runtime: str,
              progress: StepProgress, device: str = "cpu", kv_cache: bool = True, p_min: float = 0.0,
              llamacpp_loop: str = "server") -> SimulateReport:
    from ..support.bounds import check_decode
    from ..engines import resolve_engines
    from ..forward.inputs import check_prompts
    from ..config.target import target_dims

    loop = decode_loop(resolve_engines([engine])[0])  # an engine simulate cannot run is refused before any load
    progress("loading the target and the drafter", 0, 2)
    dims = target_dims(target) if (Path(target) / "config.json").is_file() else None
    if dims is not None:  # everything a config and the arguments make simulate allocate, before it does
        check_decode(dims, None, prompts, max_tokens, num_speculative_tokens, source)
    tgt = _target(target, target_runtime)
    if device != "cpu":
        from ..forward.native_target import NativeTarget

        assert isinstance(tgt, NativeTarget), "--device other than cpu opens eagleconv's runtime"
        tgt.to(device)
    tgt.pack_linears()  # on the CPU: weights reordered once for oneDNN, as vLLM runs its linears
    prompts = check_prompts(prompts, source, tgt.vocab_size)
    progress("loading the target and the drafter", 1, 2)
    return loop(Job(drafter=drafter, target=target, tgt=tgt, prompts=prompts, source=source, K=num_speculative_tokens,
                    max_tokens=max_tokens, engine=engine, progress=progress, device=device, kv_cache=kv_cache,
                    dims=dims, p_min=p_min, llamacpp_loop=llamacpp_loop))


__all__ = ["DEFAULT_PROMPTS", "EngineDrafter", "Job", "SimulateError", "SimulateReport", "accept_greedy",
           "available_threads", "decode_loop", "engine_drafter", "propose", "simulate"]
