#!/usr/bin/python3
"""Writes tests/model/fixtures/pil-gif.json: GIF files written by PIL and the RGB pixels PIL reads
from each (`Image.open(f).convert("RGB")`, what Hugging Face's processors do with a GIF: its first
frame), the oracle of src/model/vision/gif.ts. Debian's python3-pil (9.4.0 when written):

    apt-get install -y python3-pil && /usr/bin/python3 scripts/pil-gif-fixture.py
"""
import base64, io, json, os
from PIL import Image, __version__

def pattern(w, h, colours, seed):
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            k = (x * 7 + y * 13 + (x * y) % 5 + seed) % colours
            px[x, y] = ((k * 37 + seed) % 256, (k * 91) % 256, (k * 53 + 40) % 256)
    return img

def gif(img, **kw):
    buf = io.BytesIO()
    img.save(buf, format="GIF", **kw)
    return buf.getvalue()

cases = []
def add(name, data):
    rgb = Image.open(io.BytesIO(data)).convert("RGB")
    cases.append({"name": name, "gif": base64.b64encode(data).decode(), "width": rgb.width, "height": rgb.height, "rgb": base64.b64encode(rgb.tobytes()).decode()})

add("two colours", gif(pattern(9, 5, 2, 1)))
add("200 colours, interlaced", gif(pattern(37, 23, 200, 2).quantize(colors=200)))
add("256 colours, not interlaced", gif(pattern(64, 40, 256, 3).quantize(colors=256), interlace=False))
add("16 colours, a long run", gif(Image.new("RGB", (120, 80), (10, 200, 30)).quantize(colors=16)))
add("grey", gif(pattern(20, 17, 50, 4).convert("L")))
frames = [pattern(24, 18, 64, s).quantize(colors=64) for s in (5, 6)]
buf = io.BytesIO()
frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
add("animated: the first frame", buf.getvalue())
path = os.path.join(os.path.dirname(__file__), "..", "tests", "model", "fixtures", "pil-gif.json")
with open(path, "w") as fh:
    json.dump({"pil": __version__, "cases": cases}, fh)
print(path, os.path.getsize(path))
