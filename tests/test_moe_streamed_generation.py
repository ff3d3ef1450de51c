"""A streamed save (--offload disk) keeps the source's generation_config.json (its eos list and sampling
defaults), as the in-memory save_pretrained does: it wrote none."""

from __future__ import annotations

import json
import shutil

from test_moe import QUICK

GENERATION = {"eos_token_id": [0, 2], "temperature": 0.7, "top_p": 0.8, "do_sample": True}


def test_a_streamed_save_keeps_the_generation_config(make_moe, calib_file, cli, tmp_path):
    source = tmp_path / "model"
    shutil.copytree(make_moe("mixtral"), source)
    (source / "generation_config.json").write_text(json.dumps(GENERATION))
    for offload in ("none", "disk"):
        saved = tmp_path / offload
        code, _, err = cli("prune", source, "-m", "magnitude", "--offload", offload, "--save", saved, *QUICK)
        assert code == 0, err
        written = json.loads((saved / "generation_config.json").read_text())
        assert {key: written.get(key) for key in GENERATION} == GENERATION, offload
