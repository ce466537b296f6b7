"""A store with items of every kind, made for the release tests (test_release_extras.py): C-VQA from the peer
sample with drawn images, CFMM pairs with options, MuCR selected pairs; a generation, two verification judgments
per annotated item and a disagreement, so the Croissant RAI fields have figures to carry."""

from __future__ import annotations

from pathlib import Path

import PIL.Image
from sqlalchemy import select

from test_export import ACCEPTED, LICENCE, peer_rows, set_status, write_images
from test_mucr_release import selected_pairs

N_CVQA_ROWS = 12
N_CFMM = 4


def add_cfmm(workspace, folder: Path) -> list[str]:
    from cftools.images import read_image_file, register_image
    from cftools.models import Generation, Image, Item, SourceQuestion

    folder.mkdir(parents=True, exist_ok=True)
    keys = []
    with workspace.store.write() as session:
        gen = Generation(generator="pairs", backend="openai", model="stub-model", template_name="cfmm_pair",
                         template_hash="ab" * 32)
        session.add(gen)
        session.flush()
        for n in range(N_CFMM):
            path = folder / f"cfmm{n}.png"
            PIL.Image.new("RGB", (30 + n, 20), (40 * n, 90, 200)).save(path)
            image = read_image_file(path)
            register_image(workspace.store, session, image)
            image_id = session.execute(select(Image.id).where(Image.sha256 == image.sha256)).scalar_one()
            source = SourceQuestion(dataset="table:cars", external_id=str(n), image_ref=path.name, image_id=image_id,
                                    question="What color is the car?", answer="red", answer_type="other")
            session.add(source)
            session.flush()
            key = f"cfmm:{n}"
            session.add(Item(key=key, kind="cfmm", group="color", question="What color would the car be if painted "
                             "blue?", answer="blue", status=ACCEPTED, generation_id=gen.id, origin="generated",
                             source_id=source.id, dataset="table:cars",
                             data={"type": "color", "options": {"original": ["red", "green"],
                                               "counterfactual": ["yellow", "blue", "red", "black"]}}))
            keys.append(key)
    return keys


def add_judgments(workspace, keys: list[str], disagree: str) -> None:
    from cftools.models import AnnotationTask, Item, Judgment

    with workspace.store.write() as session:
        for n, key in enumerate(keys):
            item = session.execute(select(Item).where(Item.key == key)).scalar_one()
            task = AnnotationTask(item_id=item.id, ls_project_id=1, ls_task_id=100 + n, state="decided",
                                  decision=ACCEPTED)
            session.add(task)
            session.flush()
            for who in ("ann1", "ann2"):
                correct = not (key == disagree and who == "ann2")
                session.add(Judgment(task_id=task.id, annotator=who, related=True, answer_correct=correct))


def stock_every_kind(workspace, peer_cvqa_real: Path, folder: Path) -> dict[str, list[str]]:
    """Accepted items of every kind; returns their keys per kind."""
    from cftools.kinds.cvqa.ingest import ingest_cvqa
    from cftools.models import Item, SourceQuestion

    names = [row["img_path"] for row in peer_rows(peer_cvqa_real)[:N_CVQA_ROWS]]
    write_images(folder / "cvqa", names)
    ingest_cvqa(workspace.store, peer_cvqa_real, folder / "cvqa", licence=LICENCE)
    with workspace.store.session() as session:  # the C-VQA items whose image the sample has
        imaged = [i.key for i, s in session.execute(select(Item, SourceQuestion).join(
            SourceQuestion, SourceQuestion.id == Item.source_id)).all() if s.image_id is not None]
    set_status(workspace, ACCEPTED, imaged)
    cfmm = add_cfmm(workspace, folder / "cfmm")
    mucr = selected_pairs(workspace, folder / "mucr", {"rain": 4})
    add_judgments(workspace, imaged[:4] + cfmm, disagree=cfmm[0])
    return {"cvqa": imaged, "cfmm": cfmm, "mucr": mucr}


def add_published_mucr(workspace, folder: Path) -> list[str]:
    """The four MuCR records of the peer figure, ingested as published with their images under the MIT licence (the
    MuCR repository's), and accepted: items whose dataset and images come with no source question. The fourth
    panel stays a draft: two of its published explanations differ by three words, a near copy by cftools' rule, so
    no release may call it verified."""
    from cftools.kinds.mucr.ingest import ingest_mucr
    from cftools.models import Item
    from test_mucr_ingest import draw_images, published_records, write_jsonl

    folder.mkdir(parents=True, exist_ok=True)
    source = write_jsonl(folder / "human.jsonl", published_records(style="Photograph", images=True))
    draw_images(folder / "pics")
    ingest_mucr(workspace.store, source, folder / "pics", licence="MIT")
    with workspace.store.session() as session:
        keys = list(session.execute(select(Item.key).where(Item.key.like("mucr:human:%"))).scalars())
    keys = [key for key in keys if key != "mucr:human:h4"]
    set_status(workspace, ACCEPTED, keys)
    return keys
