"""The seed corpus of torchlight-fuzz: small, valid files made by the real producers.

Usage: python make_corpus.py   (writes pth/, safetensors/ and image/ next to this script;
torch 2.11.0, safetensors, Pillow 13)

Mutations of valid files reach deep into a parser; these seeds cover what each reader is fed in
practice: state_dicts as torch.save writes them (views sharing a storage, every dtype a
checkpoint holds, a 0-dim tensor, an empty tensor, parameters, module metadata), safetensors
files as safetensors.torch writes them, and images as Pillow writes them in every format
ImageFolder reads (PNG in each colour type and bit depth, interlaced; JPEG baseline, progressive,
grayscale, with EXIF orientation; BMP; GIF; WebP lossy and lossless; TIFF raw and compressed;
PPM/PGM). Every file is a few hundred bytes to a few KB, so a mutation touches structure often.
"""

import io
import shutil
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from safetensors.torch import save_file

HERE = Path(__file__).parent
for sub in ("pth", "safetensors", "image"):
    shutil.rmtree(HERE / sub, ignore_errors=True)
    (HERE / sub).mkdir()
torch.manual_seed(0)
rng = np.random.default_rng(0)

# --- .pth state_dicts -------------------------------------------------------------------------
small = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4, 2))
torch.save(small.state_dict(), HERE / "pth/conv_bn_linear.pth")
base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
views = OrderedDict(
    base=base, transposed=base.t(), row=base[1], column=base[:, 2], scalar=torch.tensor(3.5),
    empty=torch.zeros(0, 2), count=torch.tensor(7), half=torch.tensor([1.5, -2.0], dtype=torch.float16),
    bf16=torch.tensor([0.25], dtype=torch.bfloat16), mask=torch.tensor([True, False]),
    bytes=torch.tensor([[1, 255]], dtype=torch.uint8), ints=torch.tensor([-3, 4], dtype=torch.int32),
    double=torch.tensor([1e-3], dtype=torch.float64),
)
torch.save(views, HERE / "pth/views_and_dtypes.pth")
torch.save({"w": nn.Parameter(torch.ones(3))}, HERE / "pth/parameter.pth")

# --- safetensors ------------------------------------------------------------------------------
save_file({k: v.clone().contiguous() for k, v in views.items()}, HERE / "safetensors/views_and_dtypes.safetensors")
save_file({k: v.contiguous() for k, v in small.state_dict().items()}, HERE / "safetensors/conv_bn_linear.safetensors",
          metadata={"format": "pt"})
save_file({"one": torch.ones(1)}, HERE / "safetensors/one.safetensors")

# --- images -----------------------------------------------------------------------------------
rgb = Image.fromarray(rng.integers(0, 256, size=(9, 12, 3), dtype=np.uint8), "RGB")
rgba = Image.fromarray(rng.integers(0, 256, size=(9, 12, 4), dtype=np.uint8), "RGBA")
gray = rgb.convert("L")
out = HERE / "image"
rgb.save(out / "rgb.png")
rgba.save(out / "rgba.png")
gray.save(out / "gray.png")
gray.convert("LA").save(out / "gray_alpha.png")
rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(out / "palette.png")
rgb.convert("1").save(out / "bilevel.png")
rgb.save(out / "interlaced.png", interlace=1)
Image.fromarray((rng.integers(0, 65536, size=(9, 12))).astype(np.uint16)).save(out / "gray16.png")
rgb.save(out / "baseline.jpg", quality=90)
rgb.save(out / "progressive.jpg", quality=80, progressive=True)
gray.save(out / "gray.jpg")
exif = Image.Exif()
exif[0x0112] = 6
rgb.save(out / "exif_rotated.jpg", exif=exif.tobytes())
rgb.save(out / "rgb.bmp")
rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(out / "palette.bmp")
rgb.save(out / "rgb.gif")
rgb.save(out / "lossy.webp", quality=70)
rgba.save(out / "lossless.webp", lossless=True)
rgb.save(out / "raw.tif")
rgb.save(out / "lzw.tif", compression="tiff_lzw")
Image.fromarray((rng.integers(0, 65536, size=(9, 12))).astype(np.uint16)).save(out / "gray16.tif")
rgb.save(out / "rgb.ppm")
gray.save(out / "gray.pgm")
# Variants read by vision's own readers of Pillow's rules (BMP, GIF, TIFF, CMYK JPEG, XMP), as
# vision's tests/fixtures/make_variants.py writes them (run it first).
VARIANTS = HERE.parent.parent / "vision/tests/fixtures/variants"
for name in ["bmp_rle8_delta.bmp", "bmp_rle4_delta.bmp", "bmp_rgb565_bitfields.bmp", "gif_offset_transparent.gif",
             "jpeg_cmyk_adobe.jpg", "png_xmp_itxt8.png", "tiff_bigtiff.tif", "tiff_cmyk_jpeg_tiles.tif",
             "tiff_ycbcr_jpeg_strips.tif", "tiff_rgba16_assoc_planar_deflate.tif", "tiff_palette4.tif",
             "tiff_rgb_lzw_predictor.tif", "tiff_rgb_packbits.tif"]:
    (out / name).write_bytes((VARIANTS / name).read_bytes())

for sub in ("pth", "safetensors", "image"):
    files = sorted((HERE / sub).iterdir())
    print(f"{sub}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")
