"""Draws the CFMM example's images (examples/cfmm/images/*.png) with Pillow; rerun to rebuild them.

Six scenes, one per CFMM type, simple enough that every source answer and every pair can be checked by eye.
Written for cftools; public domain (CC0).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
SIZE = (160, 120)


def canvas() -> tuple[Image.Image, ImageDraw.ImageDraw]:
    image = Image.new("RGB", SIZE, (235, 235, 225))
    return image, ImageDraw.Draw(image)


def three_balls(draw: ImageDraw.ImageDraw) -> None:  # count
    for x in (20, 65, 110):
        draw.ellipse((x, 45, x + 30, 75), fill=(200, 40, 40), outline=(0, 0, 0))


def red_bus(draw: ImageDraw.ImageDraw) -> None:  # color
    draw.rectangle((20, 40, 140, 85), fill=(210, 30, 30), outline=(0, 0, 0))
    for x in (30, 60, 90, 115):
        draw.rectangle((x, 48, x + 18, 62), fill=(180, 220, 250))
    for x in (40, 115):
        draw.ellipse((x - 10, 78, x + 10, 98), fill=(30, 30, 30))


def big_and_small_square(draw: ImageDraw.ImageDraw) -> None:  # size
    draw.rectangle((15, 25, 85, 95), fill=(40, 90, 200), outline=(0, 0, 0))     # a big blue square
    draw.rectangle((110, 70, 135, 95), fill=(240, 200, 30), outline=(0, 0, 0))  # a small yellow square


def round_ball(draw: ImageDraw.ImageDraw) -> None:  # shape
    draw.ellipse((50, 30, 110, 90), fill=(240, 140, 20), outline=(0, 0, 0))
    draw.line((0, 90, 160, 90), fill=(60, 60, 60), width=3)


def arrow_right(draw: ImageDraw.ImageDraw) -> None:  # direction
    draw.rectangle((25, 52, 110, 68), fill=(20, 20, 20))
    draw.polygon([(110, 40), (140, 60), (110, 80)], fill=(20, 20, 20))


def ice_glass(draw: ImageDraw.ImageDraw) -> None:  # common
    draw.rectangle((55, 25, 105, 100), outline=(60, 60, 60), width=3)
    for x, y in ((62, 60), (80, 72), (68, 82)):
        draw.rectangle((x, y, x + 14, y + 14), fill=(210, 240, 255), outline=(120, 160, 200))


SCENES = {"balls.png": three_balls, "bus.png": red_bus, "squares.png": big_and_small_square,
          "ball.png": round_ball, "arrow.png": arrow_right, "glass.png": ice_glass}


def main() -> None:
    folder = HERE / "images"
    folder.mkdir(exist_ok=True)
    for name, draw_scene in SCENES.items():
        image, draw = canvas()
        draw_scene(draw)
        image.save(folder / name, optimize=True)


if __name__ == "__main__":
    main()
