"""Export benchmark: 50,000 items over 10,000 images from a synthetic store.

    .venv/bin/python bench/bench_export.py [--items 50000] [--images 10000] [--dir /tmp/cftools-bench-export]

Builds a workspace whose store holds the images (small drawn PNGs made with Pillow), one source
question per image and the items (70% accepted, the rest drafts), then runs
`cftools export bench --version 1 --include-unverified --licence CC-BY-4.0 --split test=0.8,dev=0.2` in a child process
and `cftools verify` on the result, printing each one's seconds and peak memory (the child's max RSS).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import PIL.Image
import PIL.ImageDraw

from cftools.models import ACCEPTED, DRAFT, Image, Item, SourceQuestion, utcnow
from cftools.workspace import init_workspace

GROUPS = ("numerical-direct", "numerical-indirect", "boolean")


def draw_image(index: int) -> bytes:
    image = PIL.Image.new("RGB", (64, 48), (index % 251, (index * 7) % 253, (index * 13) % 241))
    PIL.ImageDraw.Draw(image).ellipse((index % 40, index % 20, index % 40 + 20, index % 20 + 20), fill=(250, 250, 250))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def build_store(root: Path, n_items: int, n_images: int) -> Path:
    workspace = init_workspace(root / "ws")
    image_dir = root / "images"
    image_dir.mkdir()
    store = workspace.store
    now = utcnow()
    images, sources = [], []
    for index in range(n_images):
        data = draw_image(index)
        path = image_dir / f"img_{index:06d}.png"
        path.write_bytes(data)
        images.append({"sha256": hashlib.sha256(data).hexdigest(), "width": 64, "height": 48, "format": "png",
                       "size_bytes": len(data), "path": str(path), "created_at": now})
    with store.write() as session:
        store.insert_ignore(session, Image.__table__, images)
        ids = dict(session.execute(Image.__table__.select().with_only_columns(
            Image.__table__.c.sha256, Image.__table__.c.id)).all())
        for index, image in enumerate(images):
            sources.append({"dataset": "bench", "external_id": str(index), "image_ref": f"img_{index:06d}.png",
                            "image_id": ids[image["sha256"]], "question": f"How many circles are in picture {index}?",
                            "answer": str(index % 5), "answer_type": "number", "created_at": now})
        store.insert_ignore(session, SourceQuestion.__table__, sources)
        source_ids = dict(session.execute(SourceQuestion.__table__.select().with_only_columns(
            SourceQuestion.__table__.c.external_id, SourceQuestion.__table__.c.id)).all())
        items = []
        for index in range(n_items):
            image_index = index % n_images
            group = GROUPS[index % 3]
            answer = ("yes" if index % 2 else "no") if group == "boolean" else str(index % 9)
            items.append({"key": f"bench:{index:06d}", "kind": "cvqa", "group": group,
                          "source_id": source_ids[str(image_index)],
                          "question": f"How many circles would there be in picture {image_index} if {index % 4} "
                                      f"more circles were drawn?", "answer": answer,
                          "status": ACCEPTED if index % 10 < 7 else DRAFT, "origin": "generated",
                          "data": {"n": index}, "created_at": now, "updated_at": now})
        for start in range(0, len(items), 5000):
            store.insert_ignore(session, Item.__table__, items[start:start + 5000])
    workspace.close()
    return root / "ws"


def run_child(cli_args: list[str]) -> None:
    """In the child: run the command line, then print this process's peak RSS (KiB) last."""
    from cftools.cli import main as cli

    try:
        cli.main(cli_args, standalone_mode=False)
    finally:
        print(f"maxrss_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")


def timed_child(cli_args: list[str]) -> tuple[float, float]:
    """Seconds and peak memory (MiB) of one cftools command in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", *cli_args], check=True, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    last = done.stdout.strip().splitlines()[-1]
    return seconds, int(last.split("=", 1)[1]) / 1024


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        run_child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/cftools-bench-export"))
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)

    start = time.perf_counter()
    ws = build_store(args.dir, args.items, args.images)
    print(f"synthetic store: {args.items} items, {args.images} images in {time.perf_counter() - start:.1f} s")

    seconds, peak = timed_child(["--workspace", str(ws), "export", "bench", "--version", "1", "--include-unverified", "--licence", "CC-BY-4.0",
                                           "--split", "test=0.8,dev=0.2"])
    release = ws / "releases" / "bench-1"
    size = sum(p.stat().st_size for p in release.rglob("*") if p.is_file()) / 2**20
    print(f"export: {seconds:.1f} s, peak memory {peak:.0f} MiB, release {size:.0f} MiB")
    seconds, peak = timed_child(["verify", str(release)])
    print(f"verify: {seconds:.1f} s, peak memory {peak:.0f} MiB")


if __name__ == "__main__":
    main()
