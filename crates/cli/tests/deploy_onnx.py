"""Classifies images with an exported ONNX file the way a deployer would: the preprocessing is
rebuilt from the file's metadata alone (nothing else is known about the model).

Usage: python deploy_onnx.py MODEL.onnx OUT_DIR IMAGE...

Writes the preprocessed inputs to OUT_DIR/inputs.safetensors (key: the image's position) and
prints one line per image: `<image> <p0> <p1> ...`, the softmax probabilities in class order
(`class_names` from the metadata; a graph whose metadata says `output` = `probabilities`,
exported with `--tta hflip`, gives them itself). The Rust test compares both with Torchlight's.
"""

import json
import sys

import onnx
import onnxruntime as ort
import torch
import torchvision.transforms as T
from safetensors.torch import save_file
from torchvision.datasets.folder import pil_loader

path, out_dir, images = sys.argv[1], sys.argv[2], sys.argv[3:]
meta = {p.key: p.value for p in onnx.load(path).metadata_props}
assert meta["color_order"] == "RGB" and meta["input_layout"] == "NCHW" and meta["input_scale"] == "1/255", meta
interpolation = {"bilinear": T.InterpolationMode.BILINEAR}[meta["resize_interpolation"]]
transform = T.Compose(
    [
        T.Resize(int(meta["resize_shorter_side"]), interpolation=interpolation, antialias=meta["resize_antialias"] == "true"),
        T.CenterCrop(json.loads(meta["center_crop"])),
        T.ToTensor(),
        T.Normalize(json.loads(meta["mean"]), json.loads(meta["std"])),
    ]
)
classes = json.loads(meta["class_names"])
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
inputs = {}
for i, image in enumerate(images):
    x = transform(pil_loader(image)).unsqueeze(0)
    inputs[str(i)] = x[0].contiguous()
    x = x.numpy()
    out = torch.from_numpy(session.run(None, {name: x})[0])
    probs = (out if meta.get("output") == "probabilities" else out.softmax(-1))[0]
    assert probs.numel() == len(classes)
    print(image, " ".join(f"{p:.8f}" for p in probs.tolist()))
save_file(inputs, f"{out_dir}/inputs.safetensors")
