"""Property: randomised GGUF files (valid headers, bombs in the values) through inspect, validate and convert.

Each input is the tiny pair's eagle3 GGUF with a few of its keys or tensor entries replaced by hypothesis: counts
near 2^64, negative or BOOL sizes, inf and NaN, sparse arrays of up to 2^40 elements (a hole in the file),
duplicate, overlapping and misaligned tensors, unknown types.  Each command must end in one of two ways: exit 0
or 1 (read, with or without findings), or exit 2 with one line naming the file; never a traceback or "internal
error", never past the address-space rlimit this process sets on itself, never past ``--deadline`` CPU seconds.

    python tests/fuzz/fuzz_gguf.py --examples 6             # the suite's cheap run (tests/formats)
    python tests/fuzz/fuzz_gguf.py --seconds 60 --random    # .ci/fuzz
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from click.testing import CliRunner  # noqa: E402
from hypothesis import HealthCheck, example, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from eagleconv.cli.main import cli  # noqa: E402
from eagleconv.conversion import convert  # noqa: E402
from tests.support.gguf_bytes import ARRAY, BOOL, SCALARS, STRING, Gguf, Hole  # noqa: E402

PAIR = REPO / "fixtures" / "tiny-pair"
KEYS = ("eagle3.block_count", "eagle3.context_length", "eagle3.embedding_length", "eagle3.feed_forward_length",
        "eagle3.attention.head_count", "eagle3.attention.head_count_kv", "eagle3.rope.freq_base",
        "eagle3.attention.layer_norm_rms_epsilon", "eagle3.attention.key_length", "eagle3.vocab_size",
        "eagle3.target_hidden_size", "eagle3.target_layers", "eagle3.norm_before_fc", "general.alignment",
        "general.architecture", "tokenizer.ggml.tokens", "general.bomb")
# bombs first: hypothesis' simplest draw is the first element, so a short fixed run still meets them
EXTREMES = [2 ** 64 - 1, 2 ** 63 - 1, 2 ** 62, 2 ** 40, 2 ** 32 - 1, 2 ** 31, 2 ** 31 - 1, 256, 255, 7, 3, 2, 1, 0]
FLOATS = [float("inf"), float("nan"), float("-inf"), 1e38, -1.0, 0.0, -0.0, 1e-5]
LIMITS = {0: (0, 255), 1: (-128, 127), 2: (0, 2 ** 16 - 1), 3: (-2 ** 15, 2 ** 15 - 1), 4: (0, 2 ** 32 - 1),
          5: (-2 ** 31, 2 ** 31 - 1), 10: (0, 2 ** 64 - 1), 11: (-2 ** 63, 2 ** 63 - 1)}


BATCH = 50  # generated files per hypothesis call under --seconds (about half a second)
FIXED = {"eagle3.block_count": (10, None, 10 ** 9), "general.bomb": (ARRAY, 0, Hole(3 * 10 ** 8))}


def scalar(vtype: int) -> st.SearchStrategy:
    if vtype in (6, 12):
        return st.sampled_from(FLOATS)
    if vtype == BOOL:
        return st.booleans()
    low, high = LIMITS[vtype]
    return st.sampled_from([v for v in EXTREMES + [-1, -5, -2 ** 31] if low <= v <= high])


@st.composite
def value(draw: st.DrawFn) -> tuple[int, int | None, object]:
    kind = draw(st.sampled_from(["hole", "scalar", "array", "string"]))
    if kind == "string":
        return STRING, None, draw(st.sampled_from(["eagle3", "llama", "", "\x1b[2J", "x" * 300]))
    if kind == "hole":
        sub = draw(st.sampled_from(sorted(SCALARS)))
        return ARRAY, sub, Hole(draw(st.sampled_from([2 ** 22 + 1, 3 * 10 ** 8, 10 ** 9])), sub)
    vtype = draw(st.sampled_from(sorted(SCALARS)))
    if kind == "scalar":
        return vtype, None, draw(scalar(vtype))
    return ARRAY, vtype, draw(st.lists(scalar(vtype), max_size=5))


@st.composite
def hostile(draw: st.DrawFn, base: Gguf) -> Gguf:
    g = Gguf(dict(base.kv), list(base.tensors), base.data)
    for key in draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)):
        if draw(st.integers(0, 5)) == 0:
            g.kv.pop(key, None)
        else:
            vtype, sub, v = draw(value())
            g.set(key, vtype, v, sub)
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(g.tensors) - 1))
        name, ggml, ne, offset = g.tensors[i]
        edit = draw(st.sampled_from(["duplicate", "offset", "dims", "type"]))
        if edit == "duplicate":
            g.tensors.append(g.tensors[i])
        elif edit == "offset":
            g.tensors[i] = (name, ggml, ne, draw(st.sampled_from([0, 1, 32, (offset + 4) % 2 ** 64, 2 ** 40, 2 ** 64 - 1])))
        elif edit == "dims":
            g.tensors[i] = (name, ggml, tuple(draw(st.sampled_from([0, 1, 2 ** 32, 2 ** 63])) for _ in ne), offset)
        else:
            g.tensors[i] = (name, draw(st.sampled_from([0, 1, 2, 27, 30, 31, 99, 2 ** 32 - 1])), ne, offset)
    return g


def check(path: Path, work: Path, deadline: float) -> None:
    """inspect, validate and convert: exit 0/1, or exit 2 in one line naming ``path``; within ``deadline`` s."""
    out = work / "out"
    for args in (["inspect", str(path)], ["validate", str(path), "--engine", "llama.cpp", "--target",
                                          str(PAIR / "target"), "--no-numeric"],
                 ["convert", str(path), str(out), "--to", "vllm"]):
        start = time.process_time()  # CPU seconds: a shared CI machine's load does not count, a growing loop does
        result = CliRunner().invoke(cli, args)
        took = time.process_time() - start
        text = result.output
        assert took < deadline, f"{args[0]} took {took:.1f} CPU s"
        assert "Traceback" not in text and "internal error" not in text, (args[0], text[-2000:])
        assert result.exit_code in (0, 1, 2), (args[0], result.exit_code, text[-2000:])
        if result.exit_code == 2:
            lines = text.strip().splitlines()
            assert len(lines) == 1 and str(path) in lines[0], (args[0], lines[:5])
        shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=10 ** 9)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--rlimit-mb", type=int, default=3072, help="address space above what imports took")
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--random", action="store_true", help="new inputs each run (default: hypothesis' fixed ones)")
    args = parser.parse_args(argv[1:])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="eagleconv-fuzz-gguf-"))
    try:
        from tests.formats.test_gguf import target_for

        convert(PAIR / "eagle3", work / "base.gguf", "gguf", target=target_for(PAIR / "eagle3", work))
        base = Gguf.read(work / "base.gguf")
        warm = CliRunner().invoke(cli, ["validate", str(work / "base.gguf"), "--engine", "llama.cpp", "--no-numeric",
                                        "--target", str(PAIR / "target")])  # first imports (transformers) done here
        assert warm.exit_code == 0, warm.output
        with open("/proc/self/statm", encoding="ascii") as fh:  # the imports are done: bound what follows
            used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = used + args.rlimit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        stop = time.monotonic() + args.seconds if args.seconds is not None else None
        runs = 0

        def body(g: Gguf) -> None:
            nonlocal runs
            if stop is not None and time.monotonic() > stop:
                return  # the rest of this batch is skipped, cheaply
            runs += 1
            check(g.write(work / "h.gguf"), work, args.deadline)

        def batch(number: int) -> Callable[[], None]:
            """One hypothesis call. Batch 0 also runs the bombs round 5 found. Under --seconds each batch has a
            seed of its own (the batch's number, or a fresh one with --random) and they run until the time is up:
            the time is never ended by raising from the test, which hypothesis replays as a failure (an input that
            ran clean before the deadline and raised after it was a FlakyFailure: CI, stop 39)."""
            test = given(hostile(base))(body)
            if number == 0:
                for key, (vtype, sub, v) in FIXED.items():
                    test = example(Gguf(dict(base.kv), list(base.tensors), base.data).set(key, vtype, v, sub))(test)
            if stop is not None and not args.random:
                test = seed(number)(test)
            return settings(max_examples=args.examples if stop is None else min(args.examples, BATCH),
                            deadline=None, database=None, derandomize=stop is None and not args.random,
                            suppress_health_check=list(HealthCheck))(test)

        batch(0)()
        number = 1
        while stop is not None and time.monotonic() < stop:
            batch(number)()
            number += 1
        print(f"gguf fuzz: {runs} files through inspect, validate and convert under a {limit >> 20} MiB address "
              "space: each read, or refused in one line")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
