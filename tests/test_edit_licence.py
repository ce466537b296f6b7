"""An edit model's licence is its model card's, else the known table's, else `[edits] licence` / `--licence`
(docs/generate.md, the cftools.toml init writes): a licence given in the workspace does not override what the model
says of itself, so a non-commercial model is still refused unless asked, and recorded under its own licence."""

import shutil

import pytest

from cftools.imagegen.base import ImageGenError
from cftools.imagegen.edits import make_edit_backend
from cftools.imagegen.tiny_edit import embedded_edit_pipeline_folder

NON_COMMERCIAL = "flux-1-dev-non-commercial-license"


@pytest.fixture(scope="module")
def pipeline_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model") / "kontext"
    shutil.copytree(embedded_edit_pipeline_folder(tmp_path_factory.mktemp("edit-cache")), folder)
    return folder


def test_a_configured_licence_does_not_override_the_model_card(pipeline_folder):
    (pipeline_folder / "README.md").write_text(f"---\nlicense: {NON_COMMERCIAL}\n---\n# a model\n")
    with pytest.raises(ImageGenError, match="not for commercial use"):
        make_edit_backend({"licence": "Apache-2.0"}, model=str(pipeline_folder))
    backend = make_edit_backend({"licence": "Apache-2.0", "allow_non_commercial": True}, model=str(pipeline_folder))
    try:
        assert backend.licence == NON_COMMERCIAL
    finally:
        backend.close()


def test_the_configured_licence_is_taken_where_the_model_says_none(pipeline_folder):
    (pipeline_folder / "README.md").unlink(missing_ok=True)
    backend = make_edit_backend({"licence": "MIT"}, model=str(pipeline_folder))
    try:
        assert backend.licence == "MIT"
    finally:
        backend.close()
