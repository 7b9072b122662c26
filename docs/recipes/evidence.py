"""The PyTorch side of the recipes' evidence table (docs/recipes/README.md): `plain.toml` and
`modern.toml` written as the plain PyTorch/torchvision script a user would write, run on the
same ImageFolder as `torchlight train --config docs/recipes/<recipe>.toml`.

What both sides do: resnet18 from scratch (torchvision's init, seeded), a seeded stratified
10% validation split of `train/` evaluated every epoch, AdamW (lr 1e-3; weight decay on the
>= 2-D parameters only, as Torchlight's parameter groups give it: 0.01 plain, 0.05 modern),
one LinearLR warm-up epoch from 0.01 then cosine annealing, both stepped per epoch,
RandomResizedCrop + horizontal flip, and torchvision's evaluation preset (resize to
size * 256 / 224, centre crop). `modern` adds what torchvision's references/classification/
train.py adds for the same flags: TrivialAugmentWide, RandomErasing(0.25), Mixup(0.2)/CutMix(1.0)
(one per batch, in the collate_fn), label smoothing 0.1 and `--model-ema` (steps 32, decay
0.99998 adjusted as train.py adjusts it, copying the weights during the warm-up epoch),
validated every epoch; the test split is evaluated with the best checkpoint (the EMA's when
it validated better), as `torchlight train` does.

The split draws from Python's `random`, not Torchlight's generator, so the two sides hold out
different (equally sized, stratified) validation images; everything else is the same recipe.

usage: python docs/recipes/evidence.py --recipe plain|modern --data DIR [--image-size 32]
           [--epochs 10] [--batch-size 32] [--workers 2] [--seed 0] --out DIR
Prints one JSON line: test_acc, best_epoch (of the selected weights), wall_s (the whole script, imports included),
train_images, epochs, selected ("model" or "ema"); on stderr, one line per epoch (training loss
and accuracy, the latter against the dominant label of a mixed target, validation accuracy, lr).
"""

import argparse
import copy
import json
import os
import random
import sys
import time

START = time.perf_counter()

import torch  # noqa: E402
from torch.utils.data import DataLoader, Subset, default_collate  # noqa: E402
from torchvision import datasets, models, transforms  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


class MixCollate:
    """train.py's `collate_fn = lambda batch: mixup_cutmix(*default_collate(batch))`."""

    def __init__(self, num_classes):
        self.mix = v2.RandomChoice(
            [v2.MixUp(alpha=0.2, num_classes=num_classes), v2.CutMix(alpha=1.0, num_classes=num_classes)]
        )

    def __call__(self, batch):
        return self.mix(*default_collate(batch))


class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    """torchvision's references/classification/utils.py ExponentialMovingAverage."""

    def __init__(self, model, decay):
        def ema_avg(avg_model_param, model_param, num_averaged):
            return decay * avg_model_param + (1 - decay) * model_param

        super().__init__(model, "cpu", ema_avg, use_buffers=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", choices=["plain", "modern"], required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="folder for the per-epoch checkpoint, as train.py's --output-dir")
    a = parser.parse_args()
    modern, size, batch, epochs = a.recipe == "modern", a.image_size, a.batch_size, a.epochs
    torch.manual_seed(a.seed)

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
    train_set = datasets.ImageFolder(f"{a.data}/train", transform=train_tf)
    val_set = datasets.ImageFolder(f"{a.data}/train", transform=eval_tf)
    test_set = datasets.ImageFolder(f"{a.data}/test", transform=eval_tf)
    by_class = {}
    for i, (_, c) in enumerate(train_set.samples):
        by_class.setdefault(c, []).append(i)
    rng = random.Random(a.seed)
    train_idx, val_idx = [], []
    for idx in by_class.values():
        rng.shuffle(idx)
        k = max(1, round(len(idx) * 0.1))
        val_idx += idx[:k]
        train_idx += idx[k:]
    classes = len(train_set.classes)
    collate = MixCollate(classes) if modern else default_collate
    train_loader = DataLoader(
        Subset(train_set, train_idx), batch_size=batch, shuffle=True, num_workers=a.workers, collate_fn=collate
    )
    val_loader = DataLoader(Subset(val_set, val_idx), batch_size=batch, num_workers=a.workers)
    test_loader = DataLoader(test_set, batch_size=batch, num_workers=a.workers)

    model = models.resnet18(num_classes=classes)
    wd = 0.05 if modern else 0.01
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    warmup = 1
    sched = torch.optim.lr_scheduler.SequentialLR(
        opt,
        [
            torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=warmup),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs - warmup)),
        ],
        milestones=[warmup],
    )
    ema = None
    ema_steps = 32
    if modern:
        alpha = min(1.0, (1.0 - 0.99998) * batch * ema_steps / epochs)
        ema = ExponentialMovingAverage(model, decay=1.0 - alpha)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1 if modern else 0.0)

    def accuracy(m, loader):
        m.eval()
        correct, total = 0, 0
        with torch.no_grad():
            for x, y in loader:
                correct += (m(x).argmax(1) == y).sum().item()
                total += len(y)
        return correct / total

    best, best_epoch, best_state = -1.0, 0, None
    best_ema, best_ema_epoch, best_ema_state = -1.0, 0, None
    os.makedirs(a.out, exist_ok=True)
    for epoch in range(epochs):
        model.train()
        seen, loss_sum, hits = 0, 0.0, 0
        for i, (x, y) in enumerate(train_loader):
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            loss_sum += loss.item() * len(y)
            # Mixed targets are probabilities: their argmax is the dominant label.
            hits += (out.argmax(1) == (y.argmax(1) if y.ndim == 2 else y)).sum().item()
            if ema is not None and i % ema_steps == 0:
                ema.update_parameters(model)
                if epoch < warmup:
                    ema.n_averaged.fill_(0)
        lr = opt.param_groups[0]["lr"]
        sched.step()
        acc = accuracy(model, val_loader)
        print(
            f"epoch {epoch + 1}/{epochs}  train loss {loss_sum / seen:.4f} acc {hits / seen:.3f}  val acc {acc:.3f}  lr {lr:.2e}",
            file=sys.stderr,
            flush=True,
        )
        if acc > best:
            best, best_epoch, best_state = acc, epoch + 1, copy.deepcopy(model.state_dict())
        if ema is not None:
            ema_acc = accuracy(ema, val_loader)
            if ema_acc > best_ema:
                best_ema, best_ema_epoch = ema_acc, epoch + 1
                best_ema_state = copy.deepcopy(ema.module.state_dict())
        # train.py saves its checkpoint every epoch; so does `torchlight train`.
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "lr_scheduler": sched.state_dict()}
        if ema is not None:
            state["model_ema"] = ema.state_dict()
        torch.save(state, os.path.join(a.out, "checkpoint.pth"))
    selected = "model"
    if ema is not None and best_ema > best:
        selected, best_epoch = "ema", best_ema_epoch
        model.load_state_dict(best_ema_state)
    else:
        model.load_state_dict(best_state)
    test_acc = accuracy(model, test_loader)
    print(
        json.dumps(
            {
                "test_acc": test_acc,
                "best_val_acc": max(best, best_ema),
                "best_epoch": best_epoch,
                "selected": selected,
                "train_images": len(train_idx),
                "epochs": epochs,
                "wall_s": time.perf_counter() - START,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
