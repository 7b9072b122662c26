"""The PyTorch side of `cargo xtask bench`: the same workloads as torchlight-bench's
`workloads.rs`, served over the same line protocol.

Reads `run <workload> <warmup> <reps>` lines on stdin and answers `ok <seconds>...` or
`err <message>`; workloads are built on first use and kept. `stages <train|eval|policy> <images>`
answers `ok <stage>=<ms per image>...` (`stage_timings`, mirroring torchlight-bench's
`stages.rs`). The text rows are in `pytorch_text_bench.py`.

usage: python pytorch_bench.py --threads T --data DIR --scratch DIR --text DIR
       python pytorch_bench.py --allreduce-peer   (rank 1 of the all-reduce rows)
"""

import argparse
import copy
import io
import os
import random
import shutil
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torchvision
import pytorch_text_bench
from PIL import Image
from torch.utils.data import DataLoader, Subset, default_collate
from torchvision import datasets, models, transforms
from torchvision.transforms import functional as F

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def pil_loader(path):
    # torchvision's default loader for ImageFolder.
    with open(path, "rb") as f:
        img = Image.open(f)
        return img.convert("RGB")


class Decode:
    def __init__(self, env):
        self.paths = [p for p, _ in datasets.ImageFolder(env.data).samples]

    def run(self):
        n = 0
        for p in self.paths:
            n += len(pil_loader(p).tobytes())
        return n


def train_transform():
    return transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


def policy_transform():
    # The classification preset with --auto-augment ta_wide --random-erase 0.25.
    return transforms.Compose(
        [
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.TrivialAugmentWide(),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            transforms.RandomErasing(0.25),
        ]
    )


def eval_transform():
    return transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


class Pipeline:
    def __init__(self, env, workers, transform):
        self.dataset = datasets.ImageFolder(env.data, transform=transform)
        generator = torch.Generator().manual_seed(0)
        self.loader = DataLoader(
            self.dataset, batch_size=32, shuffle=True, num_workers=workers, generator=generator
        )

    def run(self):
        seen = 0
        for images, _targets in self.loader:
            seen += images.shape[0]
        assert seen == len(self.dataset), seen


STAGE_BATCH = 32


def stage_timings(data, pipeline, images):
    """Milliseconds per image of each step of the `train`, `eval` or `policy` pipeline over
    `images` files spread evenly over the folder, one thread: a dict in the order the steps run."""
    if pipeline not in ("train", "eval", "policy"):
        raise ValueError(f"no pipeline `{pipeline}`; the pipelines are train, eval, policy")
    samples = datasets.ImageFolder(data).samples
    n = min(images, len(samples))
    if n == 0:
        raise ValueError(f"{data} has no images")
    train = pipeline in ("train", "policy")
    policy = pipeline == "policy"
    augment, erasing = transforms.TrivialAugmentWide(), transforms.RandomErasing(0.25)
    crop = (
        transforms.RandomResizedCrop(224)
        if train
        else transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])
    )
    keys = ["read", "decode", "crop_resize", "flip", "policy", "to_tensor", "normalize", "erase"]
    seconds = dict.fromkeys(keys, 0.0)
    batch_s = 0.0
    pending = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(n):
            path, target = samples[i * len(samples) // n]
            t0 = time.perf_counter()
            with open(path, "rb") as f:
                img = Image.open(io.BytesIO(f.read()))
            t1 = time.perf_counter()
            img = img.convert("RGB")  # what torchvision's pil_loader does; it loads the pixels
            t2 = time.perf_counter()
            img = crop(img)
            t3 = time.perf_counter()
            # RandomHorizontalFlip(0.5): every other image, as on the Torchlight side.
            if train and i % 2 == 0:
                img = F.hflip(img)
            t4 = time.perf_counter()
            if policy:
                img = augment(img)
            t5 = time.perf_counter()
            tensor = F.to_tensor(img)
            t6 = time.perf_counter()
            tensor = F.normalize(tensor, IMAGENET_MEAN, IMAGENET_STD)
            t7 = time.perf_counter()
            if policy:
                tensor = erasing(tensor)
            t8 = time.perf_counter()
            spans = [(t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5), (t5, t6), (t6, t7), (t7, t8)]
            for key, (a, b) in zip(keys, spans):
                seconds[key] += b - a
            pending.append((tensor, target))
            if len(pending) == STAGE_BATCH or i + 1 == n:
                start = time.perf_counter()
                default_collate(pending)
                batch_s += time.perf_counter() - start
                pending = []
    finally:
        torch.set_num_threads(threads)
    seconds["batch"] = batch_s
    if not train:
        del seconds["flip"]
    if not policy:
        del seconds["policy"], seconds["erase"]
    return {key: s * 1e3 / n for key, s in seconds.items()}


def inputs(batch, size):
    torch.manual_seed(0)
    return torch.randn(batch, 3, size, size), torch.randint(10, (batch,))


def adamw(model, **kw):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, **kw)


class TrainStep:
    def __init__(self, model, batch, size):
        self.model = model.train()
        self.opt = adamw(model)
        self.loss = torch.nn.CrossEntropyLoss()
        self.x, self.y = inputs(batch, size)

    def run(self):
        self.opt.zero_grad()
        loss = self.loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()


def ones_grads(model):
    sum(p.sum() for p in model.parameters()).backward()


class AdamWStep:
    def __init__(self, fused):
        self.model = models.resnet34(num_classes=1000)
        ones_grads(self.model)
        self.opt = adamw(self.model, fused=fused)

    def run(self):
        self.opt.step()


class Eval:
    def __init__(self):
        self.model = models.resnet34(num_classes=1000).eval()
        self.x, _ = inputs(32, 224)

    def run(self):
        with torch.no_grad():
            return self.model(self.x)


class EmaUpdate:
    """timm's ModelEmaV3.update(model, step) (foreach path) over resnet50's state, as
    `torch._foreach_lerp_` of the floating tensors and `copy_` of the others."""

    def __init__(self):
        self.model = models.resnet50(num_classes=1000)
        self.ema = copy.deepcopy(self.model)
        self.step = 0

    @torch.no_grad()
    def run(self):
        self.step += 1
        decay = 0.0 if self.step <= 1 else 0.9999
        ema_lerp, model_lerp = [], []
        for ema_v, model_v in zip(self.ema.state_dict().values(), self.model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_lerp.append(ema_v)
                model_lerp.append(model_v)
            else:
                ema_v.copy_(model_v)
        torch._foreach_lerp_(ema_lerp, model_lerp, weight=1.0 - decay)


class MixBatch:
    """torchvision v2's RandomChoice([MixUp(alpha=0.2), CutMix(alpha=1.0)]) on one batch."""

    def __init__(self):
        from torchvision.transforms import v2
        self.x, self.y = inputs(32, 64)
        self.t = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=10), v2.CutMix(alpha=1.0, num_classes=10)])

    def run(self):
        return self.t(self.x, self.y)


class CheckpointIo:
    def __init__(self, env):
        self.model = models.resnet50(num_classes=1000)
        ones_grads(self.model)
        self.opt = adamw(self.model)
        self.opt.step()
        os.makedirs(env.scratch, exist_ok=True)
        self.path = os.path.join(env.scratch, "pytorch_ckpt.pt")

    def run(self):
        torch.save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}, self.path)
        ckpt = torch.load(self.path)
        self.model.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["optimizer"])


E2E_EPOCHS = 2


class MixCollate:
    """torchvision train.py's `collate_fn = lambda batch: mixup_cutmix(*default_collate(batch))`:
    one of Mixup(0.2) / CutMix(1.0) per batch, in the loader's workers."""

    def __init__(self, num_classes):
        from torchvision.transforms import v2

        self.mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=num_classes), v2.CutMix(alpha=1.0, num_classes=num_classes)])

    def __call__(self, batch):
        return self.mix(*default_collate(batch))


class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """torchvision's references/classification/utils.py ExponentialMovingAverage."""

    def __init__(self, model, decay):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, "cpu", ema_avg, use_buffers=True)


class EndToEnd:
    """The plain PyTorch script a user would write for the recipe `torchlight train` runs:
    resnet18 at 32 px, 2 loader workers, batch 32, AdamW + cosine, a seeded stratified 10%
    validation split evaluated every epoch, and a checkpoint (last, and best when it improves)
    saved every epoch. `modern`: docs/recipes/modern.toml as torchvision's train.py runs it
    (TrivialAugmentWide, RandomErasing(0.25), Mixup/CutMix in the collate_fn, label smoothing
    0.1, ExponentialMovingAverage every 32 steps validated every epoch, a LinearLR warm-up epoch,
    weight decay 0.05 on the >= 2-D parameters only)."""

    def __init__(self, env, modern=False):
        self.data = env.data
        self.modern = modern
        self.out = os.path.join(env.scratch, "e2e_modern_pytorch" if modern else "e2e_pytorch")
        os.makedirs(self.out, exist_ok=True)

    def run(self):
        size, batch, modern = 32, 32, self.modern
        train_steps = [transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip()]
        if modern:
            train_steps.append(transforms.TrivialAugmentWide())
        train_steps += [transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        if modern:
            train_steps.append(transforms.RandomErasing(p=0.25))
        train_tf = transforms.Compose(train_steps)
        eval_tf = transforms.Compose(
            [
                transforms.Resize(size * 256 // 224),
                transforms.CenterCrop(size),
                transforms.ToTensor(),
                transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            ]
        )
        train_set = datasets.ImageFolder(self.data, transform=train_tf)
        val_set = datasets.ImageFolder(self.data, transform=eval_tf)
        by_class = {}
        for i, (_, c) in enumerate(train_set.samples):
            by_class.setdefault(c, []).append(i)
        rng = random.Random(0)
        train_idx, val_idx = [], []
        for idx in by_class.values():
            rng.shuffle(idx)
            k = max(1, round(len(idx) * 0.1))
            val_idx += idx[:k]
            train_idx += idx[k:]
        classes = len(train_set.classes)
        collate = MixCollate(classes) if modern else default_collate
        train_loader = DataLoader(
            Subset(train_set, train_idx), batch_size=batch, shuffle=True, num_workers=2, collate_fn=collate
        )
        val_loader = DataLoader(Subset(val_set, val_idx), batch_size=batch, num_workers=2)
        torch.manual_seed(0)
        model = models.resnet18(num_classes=classes)
        if modern:
            decay = [p for p in model.parameters() if p.ndim > 1]
            no_decay = [p for p in model.parameters() if p.ndim <= 1]
            groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}]
            opt = torch.optim.AdamW(groups, lr=1e-3)
            sched = torch.optim.lr_scheduler.SequentialLR(
                opt,
                [
                    torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=1),
                    torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, E2E_EPOCHS - 1)),
                ],
                milestones=[1],
            )
            ema_steps = 32
            alpha = min(1.0, (1.0 - 0.99998) * batch * ema_steps / E2E_EPOCHS)
            ema = ExponentialMovingAverage(model, decay=1.0 - alpha)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=E2E_EPOCHS)
            ema = None
        loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1 if modern else 0.0)

        def evaluate(m):
            m.eval()
            correct = 0
            with torch.no_grad():
                for x, y in val_loader:
                    correct += (m(x).argmax(1) == y).sum().item()
            return correct / len(val_idx)

        best, best_ema = -1.0, -1.0
        for epoch in range(E2E_EPOCHS):
            model.train()
            for i, (x, y) in enumerate(train_loader):
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
                if ema is not None and i % ema_steps == 0:
                    ema.update_parameters(model)
                    if epoch < 1:
                        ema.n_averaged.fill_(0)
            sched.step()
            acc = evaluate(model)
            last = os.path.join(self.out, "last.pt")
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1}
            if ema is not None:
                ema_acc = evaluate(ema)
                state["model_ema"] = ema.state_dict()
                if ema_acc > best_ema:
                    best_ema = ema_acc
                    torch.save(ema.module.state_dict(), os.path.join(self.out, "best_ema.pt"))
            torch.save(state, last)
            if acc > best:
                best = acc
                shutil.copyfile(last, os.path.join(self.out, "best.pt"))


# The all-reduce rows, as in torchlight-bench's allreduce.rs: name -> (float32 elements per
# all-reduce, all-reduces per repetition).
ALLREDUCE_WORKLOADS = {"allreduce_2r_256kib": (64 << 10, 20), "allreduce_2r_25mib": (25 << 18, 4)}
# The data-parallel training rows, as DDP_WORKLOADS there: name -> (batch per rank, image size);
# each repetition is DDP_STEPS training steps of resnet18 on each rank, one thread each.
DDP_WORKLOADS = {"train_ddp_2r_resnet18_64_b16": (16, 64)}
DDP_STEPS = 2
DIST_TIMEOUT = timedelta(seconds=600)
# How long the all-reduce peer gets to exit once told to stop.
PEER_EXIT_S = 60
_peer = None


def _command(values):
    dist.broadcast(torch.tensor(values, dtype=torch.int64), 0)


def _start_pair():
    """This process is rank 0 of a Gloo group whose rank 1 is a peer process; the store is
    hosted here on a free port, as torchrun's agent does."""
    global _peer
    if _peer is not None:
        return
    store = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, timeout=DIST_TIMEOUT, wait_for_workers=False)
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port))
    # The peer's stdout is not the protocol's.
    peer = subprocess.Popen([sys.executable, __file__, "--allreduce-peer"], env=env, stdout=subprocess.DEVNULL)
    _peer = (peer, store)
    dist.init_process_group("gloo", store=store, rank=0, world_size=2, timeout=DIST_TIMEOUT)


class AllReduce:
    def __init__(self, elements, count):
        _start_pair()
        self.buffer = torch.zeros(elements)
        self.count = count

    def run(self):
        _command([1, self.buffer.numel(), self.count])
        for _ in range(self.count):
            dist.all_reduce(self.buffer)


class DdpStep:
    """One rank's side of a data-parallel training row: resnet18 under torch's
    DistributedDataParallel (built by both ranks at the same command), AdamW, a fixed batch."""

    def __init__(self, row):
        batch, size = list(DDP_WORKLOADS.values())[row]
        self.model = torch.nn.parallel.DistributedDataParallel(models.resnet18(num_classes=10).train())
        self.opt = adamw(self.model)
        self.loss = torch.nn.CrossEntropyLoss()
        self.x, self.y = inputs(batch, size)

    def steps(self, steps):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for _ in range(steps):
                self.opt.zero_grad()
                self.loss(self.model(self.x), self.y).backward()
                self.opt.step()
        finally:
            torch.set_num_threads(threads)


class DdpTrain:
    def __init__(self, name):
        _start_pair()
        self.row = list(DDP_WORKLOADS).index(name)
        _command([2, self.row, 0])
        self.step = DdpStep(self.row)

    def run(self):
        _command([2, self.row, DDP_STEPS])
        self.step.steps(DDP_STEPS)


def shutdown():
    """Stops the all-reduce peer. Both ranks tear their group down at once (a peer left alone
    in destroy_process_group was seen to wait for rank 0's forever), and a peer that has not
    exited after PEER_EXIT_S is killed, so the bench never hangs here."""
    if _peer is not None:
        _command([0, 0, 0])
        dist.destroy_process_group()
        try:
            code = _peer[0].wait(timeout=PEER_EXIT_S)
        except subprocess.TimeoutExpired:
            _peer[0].kill()
            _peer[0].wait()
            raise RuntimeError(f"the all-reduce peer did not exit within {PEER_EXIT_S} s; killed it")
        if code != 0:
            raise RuntimeError("the all-reduce peer failed")


def allreduce_peer():
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), 2, is_master=False, timeout=DIST_TIMEOUT
    )
    dist.init_process_group("gloo", store=store, rank=1, world_size=2, timeout=DIST_TIMEOUT)
    buffer = torch.zeros(0)
    training = None
    while True:
        cmd = torch.zeros(3, dtype=torch.int64)
        dist.broadcast(cmd, 0)
        op, elements, count = cmd.tolist()
        if op == 0:
            break
        if op == 2:
            if training is None or training[0] != elements:
                training = (elements, DdpStep(elements))
            training[1].steps(count)
            continue
        if buffer.numel() != elements:
            buffer = torch.zeros(elements)
        for _ in range(count):
            dist.all_reduce(buffer)
    dist.destroy_process_group()


def build(name, env):
    text = pytorch_text_bench.build(name, env.text)
    if text is not None:
        return text
    if name == "decode":
        return Decode(env)
    if name == "pipeline_w0":
        return Pipeline(env, 0, train_transform())
    if name == "pipeline_w2":
        return Pipeline(env, 2, train_transform())
    if name == "pipeline_policy_w0":
        return Pipeline(env, 0, policy_transform())
    if name == "pipeline_policy_w2":
        return Pipeline(env, 2, policy_transform())
    if name == "pipeline_eval_w0":
        return Pipeline(env, 0, eval_transform())
    if name == "train_resnet18_64_b32":
        return TrainStep(models.resnet18(num_classes=10), 32, 64)
    if name == "train_resnet34_224_b8":
        return TrainStep(models.resnet34(num_classes=10), 8, 224)
    if name == "train_mobilenet_v3_large_224_b8":
        return TrainStep(models.mobilenet_v3_large(num_classes=10), 8, 224)
    if name == "train_efficientnet_b0_224_b8":
        return TrainStep(models.efficientnet_b0(num_classes=10), 8, 224)
    if name == "train_convnext_tiny_224_b4":
        return TrainStep(models.convnext_tiny(num_classes=10), 4, 224)
    if name == "train_vit_b_16_224_b4":
        return TrainStep(models.vit_b_16(num_classes=10), 4, 224)
    if name == "adamw_resnet34_vs_fused":
        return AdamWStep(fused=True)
    if name == "adamw_resnet34_vs_default":
        return AdamWStep(fused=None)
    if name == "eval_resnet34_224_b32":
        return Eval()
    if name == "train_e2e_resnet18_32_w2":
        return EndToEnd(env)
    if name == "train_e2e_modern_resnet18_32_w2":
        return EndToEnd(env, modern=True)
    if name == "checkpoint_resnet50":
        return CheckpointIo(env)
    if name == "ema_resnet50":
        return EmaUpdate()
    if name == "mixup_cutmix_64_b32":
        return MixBatch()
    if name in ALLREDUCE_WORKLOADS:
        return AllReduce(*ALLREDUCE_WORKLOADS[name])
    if name in DDP_WORKLOADS:
        return DdpTrain(name)
    raise ValueError(f"unknown workload `{name}`")


def timed(workload, warmup, reps):
    for _ in range(warmup):
        workload.run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        workload.run()
        times.append(time.perf_counter() - start)
    return times


def main():
    if sys.argv[1:] == ["--allreduce-peer"]:
        allreduce_peer()
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--text", required=True)
    env = parser.parse_args()
    torch.set_num_threads(env.threads)
    built = {}
    print(
        f"ready threads={torch.get_num_threads()} torch={torch.__version__} "
        f"torchvision={torchvision.__version__}",
        flush=True,
    )
    for line in sys.stdin:
        parts = line.split()
        if parts == ["quit"]:
            break
        try:
            if len(parts) == 3 and parts[0] == "stages":
                stages = stage_timings(env.data, parts[1], int(parts[2]))
                print("ok " + " ".join(f"{k}={v:.6f}" for k, v in stages.items()), flush=True)
                continue
            if len(parts) != 4 or parts[0] != "run":
                raise ValueError(f"bad request `{line.strip()}`")
            name, warmup, reps = parts[1], int(parts[2]), int(parts[3])
            if name not in built:
                built[name] = build(name, env)
            times = timed(built[name], warmup, reps)
            reply = "ok " + " ".join(f"{t:.9f}" for t in times)
        except Exception as e:  # noqa: BLE001 - every failure goes back to xtask as one line
            reply = "err " + f"{type(e).__name__}: {e}".replace("\n", " ")
        print(reply, flush=True)
    shutdown()


if __name__ == "__main__":
    main()
