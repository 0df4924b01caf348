"""The five interop findings of issue 12, each checked on real files.

Each test was seen failing before its fix: loading eagleconv's outputs in
speculators 0.9.0 and transformers 4.57 / 5.x is what found them (the interop
tier in ``.ci/interop`` loads them there for real; these tests pin the files).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eagleconv
from eagleconv.synthetic import DrafterRecipe, make_drafter
from tests.conftest import read_json


# -- finding 5: the modelopt EAGLE-3.1 generator --------------------------------------------------

def test_modelopt_generator_refuses_eagle31_like_modelopts_exporter(tmp_path):
    """ModelOpt's exporter asserts no key outside its allow-list (no fc_norm), so it cannot write EAGLE-3.1."""
    with pytest.raises(ValueError, match="ModelOpt.*fc_norm"):
        make_drafter(tmp_path / "m", DrafterRecipe(producer="modelopt", eagle31=True))
    assert not (tmp_path / "m").exists()


def test_every_drafter_the_generator_builds_validates_clean_of_errors(tmp_path):
    from eagleconv.synthetic import PRODUCERS

    for producer in PRODUCERS:
        for eagle31 in (False, True):
            recipe = DrafterRecipe(producer=producer, eagle31=eagle31)
            try:
                path = make_drafter(tmp_path / f"{producer}{int(eagle31)}", recipe)
            except ValueError:
                assert eagle31 and producer in ("modelopt", "eagle")
                continue
            errors = [f for f in eagleconv.validate(path, engines=(), numeric=False, allow_pickle=True).findings if f.severity == "error"]
            assert not errors, (producer, eagle31, [f.message for f in errors])
