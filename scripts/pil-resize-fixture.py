#!/usr/bin/python3
"""Writes tests/model/fixtures/pil-resize.json: PIL's resize (the one Hugging Face's image processors
call) of two test images to several sizes with BILINEAR, BICUBIC and LANCZOS, the oracle of
src/model/vision/image-resize.ts. Debian's python3-pil (9.4.0 when written):

    apt-get install -y python3-pil && /usr/bin/python3 scripts/pil-resize-fixture.py
"""
import base64, io, json, math, os
from PIL import Image, __version__

def screenshot(w, h):
    """Flat panels, 1-pixel rules, text-like strokes and a gradient: what downscaling aliases."""
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            panel = ((x // 64) + (y // 45) * 3) % 4
            r, g, b = 230 - panel * 30, 220 - panel * 10, 200 + panel * 12
            if x % 37 == 0 or y % 23 == 0:
                r, g, b = 20, 20, 20
            elif (y % 9) < 5 and ((x * 7 + y * 3) % 11) < 4 and (x // 32) % 2 == 1:
                r, g, b = 40, 60 + (x % 50), 90
            elif y > h * 3 // 4:
                r, g, b = (x * 255) // w, (y * 255) // h, 128
            px[x, y] = (r, g, b)
    return img

def small(w, h):
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = ((x * 53 + y * 17) % 256, (x * x * 7 + y * 31) % 256, 255 if (x + y) % 3 == 0 else 0)
    return img

def png(img):
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()

filters = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}
cases = []
for name, img, sizes in [("screenshot", screenshot(320, 180), [(28, 28), (56, 33), (48, 190)]), ("small", small(13, 9), [(40, 27), (6, 5)])]:
    outputs = []
    for (w, h) in sizes:
        for f, code in filters.items():
            out = img.resize((w, h), resample=code, reducing_gap=None)
            outputs.append({"width": w, "height": h, "filter": f, "rgb": base64.b64encode(out.tobytes()).decode()})
    cases.append({"name": name, "png": png(img), "outputs": outputs})
path = os.path.join(os.path.dirname(__file__), "..", "tests", "model", "fixtures", "pil-resize.json")
with open(path, "w") as fh:
    json.dump({"pil": __version__, "cases": cases}, fh)
print(path, os.path.getsize(path))
