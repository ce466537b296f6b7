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
