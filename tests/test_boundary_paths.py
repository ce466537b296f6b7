"""Home folders below another root (a cluster's /nfs/home/NAME, WSL's /mnt/c/Users/NAME) inside a text are local
paths too: the boundary releases them by their last part and the scan finds them."""

from __future__ import annotations

from cftools.boundary import Boundary, outside_boundary


def test_a_home_below_another_root_is_a_local_path_in_a_text(tmp_path):
    """Before: only a path starting at /home, /Users... was found, so `hf:/nfs/home/jdoe/models/llava` left whole."""
    boundary = Boundary(root=tmp_path)
    for text, released in [("model hf:/nfs/home/jdoe/models/llava used", "model hf:llava used"),
                           ("photos from /mnt/c/Users/jdoe/photos/a.jpg", "photos from a.jpg"),
                           ("see /data/home/jdoe/x.png.", "see x.png.")]:
        assert boundary.released(text) == released
        found = outside_boundary().findings(text)
        assert [what for _, what in found] == [f"a local absolute path ({'/' + text.split('/')[1]}/…)"], text
    for kept in ("https://example.org/nfs/home/x", "km/h and 1/2", "a/home/b", "/opt/models/flux in a text"):
        assert boundary.released(kept) == kept and outside_boundary().findings(kept) == []


def test_a_blind_spec_names_its_models_local_folder_by_its_name():
    """Before: `blind:openai:/home/jdoe/models/qwen` (a vLLM server names its model by its folder) stayed whole."""
    from cftools.boundary import public_spec

    assert public_spec("blind:openai:/home/jdoe/models/qwen") == "blind:openai:qwen"
    assert public_spec("openai:/home/jdoe/models/qwen") == "openai:qwen"
    for kept in ("blind", "blind:openai:gpt-4o", "hf:org/model", "openai:gpt-4o"):
        assert public_spec(kept) == kept
    assert public_spec("hf:C:\\models\\qwen") == "hf:qwen"
