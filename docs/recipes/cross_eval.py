"""Cross-checks the evidence table (docs/recipes/README.md): evaluates both sides' trained
weights with torchvision alone (ImageFolder, the evaluation preset Resize(size * 256 // 224),
CenterCrop, ToTensor, Normalize, models.resnet18), on the test split and on the whole train/
folder, so that an accuracy gap can be told apart from a difference in evaluation.

Run after `cargo xtask evidence`, in the reference environment, from the repository root:

    for s in 0 1 2 3 4 5; do for c in best last; do
      target/release/torchlight export --checkpoint target/evidence/runs/torchlight-plain-$s/exp_001/checkpoints/$c \\
        --format safetensors --out target/evidence/runs/torchlight-plain-$s/$c.safetensors
    done; done
    .pyref/bin/python docs/recipes/cross_eval.py --evidence target/evidence --recipe plain --seeds 0,1,2,3,4,5

Prints, per seed, the accuracy of Torchlight's best and last weights and of the script's last
checkpoint (`checkpoint.pth`, saved every epoch), then the means.
"""

import argparse

import torch
from safetensors.torch import load_file
from torchvision import datasets, models, transforms

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--evidence", required=True, help="cargo xtask evidence's folder (target/evidence)")
    p.add_argument("--recipe", choices=["plain", "modern"], default="plain")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--per-class", type=int, default=240)
    a = p.parse_args()
    size = a.image_size
    tf = transforms.Compose(
        [
            transforms.Resize(size * 256 // 224),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    root = f"{a.evidence}/set-{a.per_class}"
    loaders = {
        split: torch.utils.data.DataLoader(datasets.ImageFolder(f"{root}/{split}", transform=tf), batch_size=100)
        for split in ["test", "train"]
    }
    classes = len(loaders["test"].dataset.classes)

    def accuracies(state):
        m = models.resnet18(num_classes=classes)
        m.load_state_dict(state)
        m.eval()
        out = []
        with torch.no_grad():
            for split in ["test", "train"]:
                hits = total = 0
                for x, y in loaders[split]:
                    hits += (m(x).argmax(1) == y).sum().item()
                    total += len(y)
                out.append(hits / total)
        return out

    rows = {"torchlight best": [], "torchlight last": [], "pytorch last": []}
    for seed in [int(s) for s in a.seeds.split(",")]:
        runs = f"{a.evidence}/runs"
        tl = f"{runs}/torchlight-{a.recipe}-{seed}"
        pt = torch.load(f"{runs}/pytorch-{a.recipe}-{seed}/checkpoint.pth", weights_only=False)["model"]
        figures = {
            "torchlight best": accuracies(load_file(f"{tl}/best.safetensors")),
            "torchlight last": accuracies(load_file(f"{tl}/last.safetensors")),
            "pytorch last": accuracies(pt),
        }
        for name, acc in figures.items():
            rows[name].append(acc)
        print(f"seed {seed}: " + "  ".join(f"{n} test {t:.4f} train {r:.4f}" for n, (t, r) in figures.items()))
    for name, accs in rows.items():
        n = len(accs)
        print(f"mean {name}: test {sum(t for t, _ in accs) / n:.4f}, train/ {sum(r for _, r in accs) / n:.4f}")


if __name__ == "__main__":
    main()
