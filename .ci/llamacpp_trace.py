"""Read llama-speculative-simple's ``-v`` log (llama.cpp b11434) into rounds and counters.

Per round it logs each draft step's top-3 candidates (``common/speculative.cpp``: ``draft candidate K, pos I:
ID (P)``), then ``accepted A/N draft tokens, the last target token is: (ID)``
(``examples/speculative-simple``); at the end ``n_predict``, ``n_drafted`` and ``n_accept``.  A draft is the
candidate-0 ids in step order, cut to N (the loop truncates it to the tokens still wanted).
"""

from __future__ import annotations

import re
from typing import Any

CANDIDATE = re.compile(r"draft candidate\s+(\d+), pos\s+(\d+):\s+(\d+) \(\s*([0-9.]+)\)")
ACCEPTED = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((\d+)\)")
COUNTER = re.compile(r"\b(n_predict|n_drafted|n_accept)\s+=\s+(\d+)")


def parse(log: str) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    steps: dict[int, list[tuple[int, float]]] = {}
    counters: dict[str, int] = {}
    for line in log.splitlines():
        if m := CANDIDATE.search(line):
            rank, pos, tok, p = int(m[1]), int(m[2]), int(m[3]), float(m[4])
            if rank == 0 and pos == 0:
                steps = {}
            steps.setdefault(pos, []).append((tok, p))
        elif m := ACCEPTED.search(line):
            accepted, n, last = int(m[1]), int(m[2]), int(m[3])
            draft = [steps[i][0][0] for i in sorted(steps)][:n]
            top2 = [[steps[i][0][0], steps[i][0][1], *(steps[i][1] if len(steps[i]) > 1 else (None, None))]
                    for i in sorted(steps)]
            rounds.append({"draft": draft, "accepted": accepted, "emitted": [*draft[:accepted], last], "top2": top2})
            steps = {}
        elif m := COUNTER.search(line):
            counters[m[1]] = int(m[2])
    return {"rounds": rounds, **counters}
