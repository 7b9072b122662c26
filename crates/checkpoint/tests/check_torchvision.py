"""Loads weights Torchlight saved into torchvision's resnet18 and compares logits.

Usage: python check_torchvision.py WEIGHTS.safetensors IO.safetensors NUM_CLASSES

IO holds `x` and Torchlight's eval logits `y`. Prints `<max |diff|> <max |y|>`.
"""

import sys

import torch
import torchvision
from safetensors.torch import load_file

torch.set_num_threads(1)
weights, io, num_classes = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = torchvision.models.resnet18(num_classes=num_classes)
model.load_state_dict(load_file(weights))  # strict: every key and shape must match
model.eval()
tensors = load_file(io)
with torch.no_grad():
    out = model(tensors["x"])
print((out - tensors["y"]).abs().max().item(), tensors["y"].abs().max().item())
