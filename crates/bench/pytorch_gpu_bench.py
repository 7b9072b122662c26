"""The PyTorch side of the GPU proof kit: the rows of `torchlight-bench gpu run` (crates/bench/src/gpu.rs)
measured in PyTorch on the same machine, as the reference for Torchlight's figures.

Writes the same JSON file as the Rust side: {"side", "cuda", "reason", "versions", "rows": [{"name",
"status", "description", "detail", "values", "times_s"}]}. Without CUDA every row is "skipped: no CUDA"
(or failed with --require-cuda yes, where the machine has a GPU). A failing row is reported and the
others still run. Uses torchvision's resnet50 when torchvision is installed, else `ResNet50` below,
the same architecture (torchvision's ResNet-50 v1.5: stride 2 in the 3x3 convolution).

usage: python pytorch_gpu_bench.py --out FILE --require-cuda yes|no [--smoke]

--smoke runs every row on the CPU at toy sizes (resnet18, batch 2, 16 px, one step): how the unit tests of
torchlight-bench check this script without a GPU.
"""

import argparse
import json
import math
import os
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn

NO_CUDA = "skipped: no CUDA"
# (model, batch, image size, warm-up steps, rounds, steps per round, MiB copied), as Plan in gpu.rs.
GPU_PLAN = ("resnet50", 128, 224, 5, 3, 10, 256)
SMOKE_PLAN = ("resnet18", 2, 16, 1, 1, 1, 1)

DESCRIPTIONS = {
    "resnet50_train_fp32": "resnet50 training step, batch 128, 224 px, float32 (convolutions in TF32, "
    "PyTorch's default): zero_grad, forward, cross-entropy, backward, AdamW(fused=True)",
    "resnet50_train_amp": "the same step under torch.autocast fp16 with torch.amp.GradScaler",
    "h2d_pageable": "host-to-device copy of 256 MiB from pageable memory (blocking)",
    "h2d_pinned": "host-to-device copy of 256 MiB from pinned memory (non_blocking=True, then synchronised)",
    "grad_scaler_overflow": "GradScaler on a real fp16 overflow: a linear layer under fp16 autocast whose "
    "gradient is 256 x scale; steps skipped before the first finite one, and the scale then",
}


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(planes * 4)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes, stages = 64, []
        for planes, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
            layers = []
            for i in range(blocks):
                layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
                inplanes = planes * 4
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_model(name):
    """torchvision's model `name` when torchvision is installed, else (resnet50 only) the
    definition above; and which it was."""
    try:
        import torchvision.models
    except ImportError:
        if name != "resnet50":
            raise
        return ResNet50(1000), "pytorch_gpu_bench.ResNet50 (torchvision not installed)"
    return getattr(torchvision.models, name)(num_classes=1000), f"torchvision.models.{name}"


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median(times):
    s = sorted(times)
    return s[len(s) // 2]


class AmpTrainStep:
    def __init__(self, model, amp, device, versions):
        torch.manual_seed(0)
        model, versions["model"] = build_model(model)
        self.model = model.to(device).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
        self.scaler = torch.amp.GradScaler(device, enabled=amp)
        self.amp, self.device = amp, device

    def step(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.device, dtype=torch.float16, enabled=self.amp):
            logits = self.model(x)
        loss = F.cross_entropy(logits.float(), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()


def resnet50_row(amp, plan, device, versions):
    model, batch, size, warmup, rounds, steps, _ = plan
    step = AmpTrainStep(model, amp, device, versions)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(1000, (batch,), device=device)
    for _ in range(warmup):
        step.step(x, y)
    sync(device)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            step.step(x, y)
        sync(device)
        times.append((time.perf_counter() - start) / steps)
    m = median(times)
    return {"median_step_s": m, "images_per_s": batch / m, "batch": batch, "image_size": size}, times


def copy_row(pinned, plan, device):
    n = plan[6] << 18
    source = torch.ones(n)
    if pinned and device == "cuda":
        source = source.pin_memory()
    times = []
    for rep in range(6):
        sync(device)
        start = time.perf_counter()
        on_device = source.to(device, non_blocking=pinned)
        sync(device)
        if rep > 0:
            times.append(time.perf_counter() - start)
        del on_device
    return {"gbps": n * 4 / median(times) / 1e9, "mib": n * 4 / 2**20}, times


def overflow_row(device):
    w = torch.full((8, 256), 0.01, device=device, requires_grad=True)
    x = torch.full((64, 256), 4.0, device=device)
    opt = torch.optim.AdamW([w], lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler(device)
    first_finite, scales = None, []
    for i in range(12):
        before = w.detach().clone()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.float16):
            y = F.linear(x, w)
        scaler.scale(y.float().sum()).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        if first_finite is None and not torch.equal(w.detach(), before):
            first_finite = i
    if first_finite is None:
        raise RuntimeError(f"no step in 12 was finite; scales {scales}")
    return {"skipped_steps": first_finite, "final_scale": scales[-1]}, []


def measure(name, plan, device, versions):
    started = time.perf_counter()
    row = {"name": name, "status": "ok", "description": DESCRIPTIONS[name], "values": {}, "times_s": []}
    try:
        if name == "resnet50_train_fp32":
            values, times = resnet50_row(False, plan, device, versions)
        elif name == "resnet50_train_amp":
            values, times = resnet50_row(True, plan, device, versions)
        elif name == "h2d_pageable":
            values, times = copy_row(False, plan, device)
        elif name == "h2d_pinned":
            values, times = copy_row(True, plan, device)
        else:
            values, times = overflow_row(device)
        # JSON has no NaN or Inf: a figure that could not be computed is left out.
        row["values"] = {k: float(v) for k, v in values.items() if math.isfinite(v)}
        row["times_s"] = times
    except Exception as e:  # noqa: BLE001 - a failing row is reported, the others still run
        traceback.print_exc()
        row["status"], row["detail"] = "failed", f"{type(e).__name__}: {e}".replace("\n", " ")
    row["values"]["row_seconds"] = time.perf_counter() - started
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--require-cuda", choices=["yes", "no"], required=True)
    parser.add_argument("--smoke", action="store_true", help="every row on the CPU at toy sizes")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device, plan = ("cpu", SMOKE_PLAN) if args.smoke else ("cuda", GPU_PLAN)
    if args.smoke:
        # One thread: the smoke run shares the machine with the test harness's other tests.
        torch.set_num_threads(1)
    versions = {"torch": torch.__version__, "cuda": str(torch.version.cuda)}
    if cuda:
        versions["cudnn"] = str(torch.backends.cudnn.version())
        versions["gpu"] = torch.cuda.get_device_name(0)
    report = {
        "side": "pytorch",
        "cuda": cuda,
        "reason": None if cuda else "torch.cuda.is_available() is False",
        "versions": versions,
        "rows": [],
    }
    for name in DESCRIPTIONS:
        if cuda or args.smoke:
            row = measure(name, plan, device, versions)
        else:
            failed = args.require_cuda == "yes"
            row = {
                "name": name,
                "status": "failed" if failed else "skipped",
                "description": DESCRIPTIONS[name],
                "detail": "the machine has a GPU but torch.cuda.is_available() is False" if failed else NO_CUDA,
                "values": {},
                "times_s": [],
            }
        values = " ".join(f"{k}={v:.6f}" for k, v in row["values"].items())
        print(f"{row['name']:<22} {row['status']:<7} {values} {row.get('detail', '')}", flush=True)
        report["rows"].append(row)
    tmp = args.out + ".partial"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
