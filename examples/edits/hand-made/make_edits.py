"""Writes the hand-made edits of the six drawn-shape C-VQA items (`examples/cvqa/drawn-shapes.csv`): one edited PNG
per item that makes its counterfactual condition true (drawn with Pillow on the item's own image, nothing else
touched), one irrelevant edit (a change the question does not depend on), and `edits.csv` naming each by the item's
key. Run once; the output is committed. Import it with

    cftools ingest edits examples/edits/hand-made/edits.csv --images examples/edits/hand-made --licence CC0-1.0
"""

from __future__ import annotations

import csv
from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).parent
IMAGES = HERE.parent.parent / "vqav2" / "images"
COLOURS = {"red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 60), "yellow": (235, 200, 40)}
BACKGROUND = (245, 245, 240)
TOOL = "Pillow (by hand)"


def original(image_id: int) -> Image.Image:
    return Image.open(IMAGES / f"COCO_val2014_{image_id:012d}.jpg").convert("RGB")


def near(pixel: tuple, colour: tuple, tolerance: int = 60) -> bool:
    return sum(abs(a - b) for a, b in zip(pixel, colour)) <= tolerance


def repaint(image: Image.Image, box: tuple, old: str, new: tuple) -> Image.Image:
    """Every pixel near colour OLD inside BOX (default: the whole image) painted NEW."""
    out = image.copy()
    px = out.load()
    x0, y0, x1, y1 = box
    for y in range(y0, y1):
        for x in range(x0, x1):
            if near(px[x, y], COLOURS[old]):
                px[x, y] = new
    return out


def shapes(image: Image.Image, colour: str) -> list[tuple]:
    """Bounding boxes of the blobs of COLOUR, left to right (the scenes' shapes are 28 px apart at least)."""
    px, (w, h) = image.load(), image.size
    columns = [x for x in range(w) if any(near(px[x, y], COLOURS[colour]) for y in range(h))]
    runs, start = [], None
    for x in columns:
        if start is None or x != prev + 1:
            if start is not None:
                runs.append((start, prev))
            start = x
        prev = x
    if start is not None:
        runs.append((start, prev))
    boxes = []
    for x0, x1 in runs:
        rows = [y for y in range(h) if any(near(px[x, y], COLOURS[colour]) for x in range(x0, x1 + 1))]
        boxes.append((x0, rows[0], x1 + 1, rows[-1] + 1))
    return boxes


def drawn(image: Image.Image, shape: str, colour: str, box: tuple) -> Image.Image:
    out = image.copy()
    pen = ImageDraw.Draw(out)
    (pen.ellipse if shape == "circle" else pen.rectangle)(box, fill=COLOURS[colour])
    return out


def grown(box: tuple, by: int = 3) -> tuple:
    return (box[0] - by, box[1] - by, box[2] + by, box[3] + by)


def erase(image: Image.Image, box: tuple) -> Image.Image:
    out = image.copy()
    ImageDraw.Draw(out).rectangle(box, fill=BACKGROUND)
    return out


def repaint_boxes(image: Image.Image, boxes: list[tuple], old: str, new: tuple) -> Image.Image:
    for box in boxes:
        image = repaint(image, grown(box), old, new)
    return image


def main() -> None:
    squares = shapes(original(9003), "yellow")
    edits = [
        # (item key, file, edit, condition, instruction, image)
        ("cvqa:drawn-shapes:f73c6b3047c93467", "two-more-circles.png", "relevant", "There are five red circles.",
         "Draw two more red circles on the empty part of the picture.",
         drawn(drawn(original(9001), "circle", "red", (121, 20, 149, 48)), "circle", "red", (30, 80, 58, 108))),
        ("cvqa:drawn-shapes:f73c6b3047c93467", "a-green-square.png", "irrelevant", "There is a green square too.",
         "Draw a green square in the lower right corner.",
         drawn(original(9001), "square", "green", (120, 80, 148, 108))),
        ("cvqa:drawn-shapes:27ecff93df688223", "one-square-removed.png", "relevant", "There are three squares.",
         "Remove the rightmost yellow square.",
         erase(original(9003), grown(squares[-1]))),
        ("cvqa:drawn-shapes:cf1d114b00af2bfc", "circles-green.png", "relevant", "Every circle is green.",
         "Paint the blue circles green.",
         repaint(original(9002), (0, 0, 160, 120), "blue", COLOURS["green"])),
        ("cvqa:drawn-shapes:2076ff318466006d", "squares-blue.png", "relevant", "The squares are blue.",
         "Paint the red squares blue.",
         repaint_boxes(original(9005), shapes(original(9005), "red")[:2], "red", COLOURS["blue"])),
        ("cvqa:drawn-shapes:c90fbad5d92df6a3", "circles-yellow.png", "relevant", "The circles are yellow.",
         "Paint the red circles yellow.",
         repaint(original(9001), (0, 0, 160, 120), "red", COLOURS["yellow"])),
        ("cvqa:drawn-shapes:b711c6a525a6aa9d", "a-green-circle.png", "relevant", "There is a green circle.",
         "Draw a green circle in the middle of the picture.",
         drawn(original(9006), "circle", "green", (66, 46, 94, 74))),
    ]
    with open(HERE / "edits.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["item", "image", "edit", "condition", "instruction", "tool"])
        for key, name, which, condition, instruction, image in edits:
            image.save(HERE / name, optimize=True)
            writer.writerow([key, name, which, condition, instruction, TOOL])


if __name__ == "__main__":
    main()
