//! `cargo xtask bench [--quick] [--only=NAME,..]`: Torchlight against PyTorch, side by side in
//! one run.
//!
//! Builds `torchlight-bench` (release), generates the photo-like ImageFolder once (cached under
//! `target/bench/data`), starts a Torchlight server (`torchlight-bench serve`) and a PyTorch
//! server (`crates/bench/pytorch_bench.py` under `.pyref`) with the same thread count, and
//! alternates them on each workload: every round sends the same request to both, the side that
//! goes first swapping each round, so load from other jobs on a shared machine falls on both.
//! After the workloads both servers time the train, eval and policy input pipelines stage by stage
//! (`stages <pipeline> <images>`, one thread, [`STAGE_IMAGES`] images, two rounds alternating
//! which side goes first); skipped when `--only` names no `pipeline*` workload. The text rows
//! read a generated corpus of `.txt` documents (`torchlight-bench gen-text`, cached under
//! `target/bench/data/text_corpus`).
//! The raw timings go to `target/bench/raw.tsv`; `torchlight-bench report` turns them into
//! the table, `target/bench/report.json`, `docs/benchmarks.md` and `docs/benchmarks.png`.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// One workload: its name (shared by both sides), what a repetition does, and whether it is
/// heavy (seconds per repetition: fewer repetitions per round).
struct Workload {
    name: &'static str,
    description: &'static str,
    heavy: bool,
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "decode",
        description: "decode-only: every JPEG of the set to RGB u8 on one thread (`decode_file` vs PIL `open().convert(\"RGB\")`)",
        heavy: true,
    },
    Workload {
        name: "pipeline_w0",
        description: "one epoch: ImageFolder + RandomResizedCrop(224) + hflip + ToTensor + Normalize, batch 32, shuffled, DataLoader num_workers=0 (vs torchvision + torch DataLoader). Caveat: while other jobs loaded the 2-core machine, PyTorch's epochs at 2 threads were seen to run up to ~20x slower than at 1 thread, which made quick-run ratios of this workload meaningless; on a quiet machine no such effect shows",
        heavy: true,
    },
    Workload {
        name: "pipeline_w2",
        description: "the same epoch with num_workers=2 (PyTorch: worker processes started each epoch, its default)",
        heavy: true,
    },
    Workload {
        name: "pipeline_eval_w0",
        description: "one epoch of the evaluation transform: ImageFolder + Resize(256) + CenterCrop(224) + ToTensor + Normalize, batch 32, shuffled, num_workers=0",
        heavy: true,
    },
    Workload {
        name: "pipeline_policy_w0",
        description: "one epoch of the classification preset with `--auto-augment ta_wide --random-erase 0.25`: ImageFolder + RandomResizedCrop(224) + hflip + TrivialAugmentWide + ToTensor + Normalize + RandomErasing(0.25), batch 32, shuffled, num_workers=0 (vs torchvision on PIL + torch DataLoader)",
        heavy: true,
    },
    Workload {
        name: "pipeline_policy_w2",
        description: "the same policy epoch with num_workers=2",
        heavy: true,
    },
    Workload {
        name: "train_resnet18_64_b32",
        description: "training step, resnet18 (10 classes), 64x64, batch 32: zero_grad, forward, cross-entropy, backward, AdamW step (vs PyTorch eager, default AdamW)",
        heavy: false,
    },
    Workload {
        name: "train_resnet34_224_b8",
        description: "training step, resnet34 (10 classes), 224x224, batch 8, as above",
        heavy: true,
    },
    Workload {
        name: "train_mobilenet_v3_large_224_b8",
        description: "training step, mobilenet_v3_large (10 classes), 224x224, batch 8: zero_grad, forward, cross-entropy, backward, AdamW step (vs PyTorch eager, torchvision's model)",
        heavy: false,
    },
    Workload {
        name: "train_efficientnet_b0_224_b8",
        description: "training step, efficientnet_b0 (10 classes), 224x224, batch 8, as above (stochastic depth and dropout drawing in training)",
        heavy: false,
    },
    Workload {
        name: "train_convnext_tiny_224_b4",
        description: "training step, convnext_tiny (10 classes), 224x224, batch 4, as above",
        heavy: true,
    },
    Workload {
        name: "train_vit_b_16_224_b4",
        description: "training step, vit_b_16 (10 classes), 224x224, batch 4, as above",
        heavy: true,
    },
    Workload {
        name: "train_text_fasttext_b64",
        description: "text training step, FastText (nn's `FastText`, default `[text]` sizes: vocabulary 30000, embed 128, 4 classes), batch 64 padded to the longest of lengths 20..400 (ids + lengths): forward, cross-entropy, backward, Adam step (vs `nn.EmbeddingBag(mode=\"mean\", padding_idx=0)` + `nn.Linear`, `torch.optim.Adam`)",
        heavy: false,
    },
    Workload {
        name: "train_text_textcnn_b64",
        description: "text training step, TextCnn (embed 128, Conv1d widths 3/4/5 x 100 filters, dropout 0.5), as above (vs `nn.Embedding` + `nn.Conv1d` x3 + ReLU + max over the valid windows + `nn.Linear`)",
        heavy: false,
    },
    Workload {
        name: "train_text_bilstm_b64",
        description: "text training step, BiLstmClassifier (embed 128, one bidirectional layer of hidden 128), as above (vs `nn.Embedding` + `pack_padded_sequence(enforce_sorted=False)` + bidirectional `nn.LSTM` + `nn.Linear` on the final states)",
        heavy: true,
    },
    Workload {
        name: "train_text_transformer_b64",
        description: "text training step, TransformerClassifier (embed 128, 512 learned positions, 2 post-norm layers, 4 heads, feed-forward 512, dropout 0.1), as above (vs `nn.Embedding` + learned positions + `nn.TransformerEncoder` with `src_key_padding_mask` + masked mean + `nn.Linear`)",
        heavy: true,
    },
    Workload {
        name: "text_pipeline_w0",
        description: "one epoch of the text input pipeline over a generated corpus of 2000 `.txt` documents (4 classes, 20..400 words): TextFolder read + word-level tokenization (lower-case, split at white space and punctuation, vocabulary lookup: `WordVocab`; the PyTorch side the same rules in plain Python, not a Hugging Face tokenizer) + pad to ids [B, T] + lengths [B] (cut at 256), batch 64, shuffled, num_workers=0 (vs a `Dataset` + `DataLoader` with that `collate_fn`)",
        heavy: false,
    },
    Workload {
        name: "text_pipeline_w2",
        description: "the same text epoch with num_workers=2 (Torchlight: worker threads; PyTorch: worker processes started each epoch, its default)",
        heavy: false,
    },
    Workload {
        name: "text_pipeline_hf_w0",
        description: "the text epoch of `text_pipeline_w0` tokenized by a Hugging Face WordPiece tokenizer (8000 entries, BERT's normalizer and pre-tokenizer, trained on the corpus into its `tokenizer.json`): torchlight-text's `HfTokenizer` (the `tokenizers` crate) vs a `Dataset` calling the `tokenizers` package's `Tokenizer.from_file(...).encode` on the same file, num_workers=0",
        heavy: false,
    },
    Workload {
        name: "text_pipeline_hf_w2",
        description: "the same Hugging Face epoch with num_workers=2 (Torchlight: worker threads; PyTorch: worker processes started each epoch)",
        heavy: false,
    },
    Workload {
        name: "adamw_resnet34_vs_fused",
        description: "AdamW step alone over resnet34's 21.8M parameters (Torchlight default, fused) vs `torch.optim.AdamW(fused=True)`",
        heavy: false,
    },
    Workload {
        name: "adamw_resnet34_vs_default",
        description: "the same Torchlight step vs `torch.optim.AdamW` in its default mode (on CPU: the for-loop implementation)",
        heavy: false,
    },
    Workload {
        name: "eval_resnet34_224_b32",
        description: "eval forward, resnet34 (1000 classes), 224x224, batch 32, under no-grad",
        heavy: true,
    },
    Workload {
        name: "allreduce_2r_256kib",
        description: "20 all-reduces (sum) of a 256 KiB float32 tensor between 2 ranks on this machine, Gloo over loopback TCP: `ProcessGroup::all_reduce` vs `dist.all_reduce` (rank 1 is a peer process of each side; latency-bound)",
        heavy: false,
    },
    Workload {
        name: "allreduce_2r_25mib",
        description: "4 all-reduces of 25 MiB (DistributedDataParallel's default bucket), as above (bandwidth-bound)",
        heavy: false,
    },
    Workload {
        name: "train_ddp_2r_resnet18_64_b16",
        description: "data-parallel training on 2 ranks of this machine (one thread each, Gloo over loopback): 2 steps of resnet18 (10 classes), 64x64, batch 16 per rank (32 per step, as `train_resnet18_64_b32`), AdamW; `DistributedDataParallel` + `sync_gradients` vs torch's DDP (rank 1 is the peer process of each side); its time over `train_resnet18_64_b32`'s is the 1-vs-2-rank line below",
        heavy: true,
    },
    Workload {
        name: "train_e2e_resnet18_32_w2",
        description: "end to end: a whole `torchlight train` run (`torchlight_recipes::image::fit`: resnet18 at 32 px, 2 loader workers, batch 32, AdamW + cosine, 10% validation split evaluated each epoch, checkpoint each epoch, 2 epochs) vs the same recipe as a plain PyTorch script (torchvision transforms, DataLoader num_workers=2, torch.save each epoch); images/s is the inverse ratio",
        heavy: true,
    },
    Workload {
        name: "train_e2e_modern_resnet18_32_w2",
        description: "end to end, the modern recipe: a whole `torchlight train` run of `docs/recipes/modern.toml` at the row above's sizes (resnet18 at 32 px, 2 loader workers, batch 32, 2 epochs, 10% validation split): TrivialAugmentWide, RandomErasing(0.25), Mixup/CutMix, label smoothing 0.1, the model EMA (updated every 32 steps, validated every epoch, `best_ema` saved), a warm-up epoch, no decay on 1-D parameters, checkpoint each epoch, the test split absent; vs the same as a plain PyTorch/torchvision script (`v2.RandomChoice([v2.MixUp, v2.CutMix])` in the loader's collate_fn and torchvision's `ExponentialMovingAverage`, as torchvision's train.py does)",
        heavy: true,
    },
    Workload {
        name: "ema_resnet50",
        description: "one model-EMA update over resnet50's parameters and buffers (timm's ModelEmaV3 rule, decay 0.9999): `ModelEma::update` (one `_foreach_lerp_` per dtype, `_foreach_copy_` of the integer buffers) vs timm's update with `torch._foreach_lerp_` over `state_dict()`",
        heavy: false,
    },
    Workload {
        name: "mixup_cutmix_64_b32",
        description: "Mixup/CutMix of one batch of 32 64x64 images, 10 classes: `MixupCutMix::new(10, 0.2, 1.0).mix` vs torchvision's `v2.RandomChoice([v2.MixUp(alpha=0.2), v2.CutMix(alpha=1.0)])` (the same draws); its time over `train_resnet18_64_b32`'s is the share of a training step",
        heavy: false,
    },
    Workload {
        name: "checkpoint_resnet50",
        description: "save + load + restore of resnet50 with AdamW state: `torchlight_checkpoint::save` (atomic, fsynced, checksummed) + `Checkpoint::load` + `restore_model` + `restore_optimizer` vs `torch.save` + `torch.load` + `load_state_dict` (model and optimizer)",
        heavy: true,
    },
];

/// Images each side times stage by stage per pipeline and round (a few hundred: cheap).
const STAGE_IMAGES: usize = 256;

/// How much to measure.
struct Plan {
    images: usize,
    rounds: usize,
    heavy_reps: usize,
    light_reps: usize,
}

impl Plan {
    fn new(quick: bool) -> Self {
        if quick {
            Plan { images: 256, rounds: 2, heavy_reps: 1, light_reps: 3 }
        } else {
            Plan { images: 1000, rounds: 4, heavy_reps: 1, light_reps: 4 }
        }
    }
}

/// A workload server (either side) speaking the `run <name> <warmup> <reps>` protocol.
struct Server {
    label: &'static str,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The server's `ready ...` line.
    banner: String,
}

/// How long a bench server gets to exit after `quit` (the PyTorch one stops its all-reduce
/// peer, which it gives 60 s).
const SERVER_EXIT: std::time::Duration = std::time::Duration::from_secs(120);

impl Server {
    fn start(label: &'static str, mut cmd: Command) -> Result<Self> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start the {label} server: {cmd:?}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut server = Server { label, child, stdin, stdout, banner: String::new() };
        server.banner = server.read_line()?;
        if !server.banner.starts_with("ready") {
            bail!("the {label} server said `{}` instead of `ready`", server.banner);
        }
        Ok(server)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("the {} server exited", self.label);
        }
        Ok(line.trim_end().to_string())
    }

    /// Runs a workload; `Err` for a failure of that workload, which the bench reports and
    /// survives.
    fn run(&mut self, name: &str, warmup: usize, reps: usize) -> Result<Vec<f64>> {
        writeln!(self.stdin, "run {name} {warmup} {reps}")?;
        self.stdin.flush()?;
        let line = self.read_line()?;
        match line.split_once(' ').unwrap_or((line.as_str(), "")) {
            ("ok", times) => times.split_whitespace().map(|t| Ok(t.parse::<f64>()?)).collect(),
            ("err", message) => bail!("{} failed on {name}: {message}", self.label),
            _ => bail!("{} answered `{line}`", self.label),
        }
    }

    /// Times an input pipeline stage by stage: `(stage, ms per image)` pairs, as
    /// `stage=ms ...`.
    fn stages(&mut self, pipeline: &str, images: usize) -> Result<String> {
        writeln!(self.stdin, "stages {pipeline} {images}")?;
        self.stdin.flush()?;
        let line = self.read_line()?;
        match line.split_once(' ').unwrap_or((line.as_str(), "")) {
            ("ok", stages) => Ok(stages.to_string()),
            ("err", message) => bail!("{} failed on the {pipeline} stages: {message}", self.label),
            _ => bail!("{} answered `{line}`", self.label),
        }
    }

    fn banner_value(&self, key: &str) -> Option<&str> {
        self.banner.split_whitespace().find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }

    /// Asks the server to quit and waits for it; one that has not exited after
    /// [`SERVER_EXIT`] (its own peers' shutdown stuck, say) is killed with a line saying so, so
    /// the measurements already taken still make the report.
    fn finish(mut self) {
        let _ = writeln!(self.stdin, "quit");
        drop(self.stdin);
        let deadline = std::time::Instant::now() + SERVER_EXIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if std::time::Instant::now() >= deadline => {
                    eprintln!(
                        "xtask: the {} server had not exited {} s after `quit`; killed it",
                        self.label,
                        SERVER_EXIT.as_secs()
                    );
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(100)),
            }
        }
    }
}

fn check(status: std::process::ExitStatus, what: &str) -> Result<()> {
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// What `cargo xtask bench` was asked for.
pub struct Options {
    /// Fewer images and rounds.
    pub quick: bool,
    /// gloo's headers are there, so the all-reduce rows can be built.
    pub distributed: bool,
    /// Only these workloads; the report then goes to `target/bench` alone, not to `docs/`.
    pub only: Option<Vec<String>>,
}

/// Runs the bench; `target_dir` is cargo's target folder (the binary and `target/bench`).
pub fn bench(root: &Path, target_dir: &Path, cargo: impl Fn() -> Command, options: Options) -> Result<()> {
    let Options { quick, distributed, only } = options;
    if let Some(names) = &only {
        if let Some(unknown) = names.iter().find(|n| !WORKLOADS.iter().any(|w| w.name == n.as_str())) {
            let known: Vec<&str> = WORKLOADS.iter().map(|w| w.name).collect();
            bail!("--only: no workload `{unknown}`; the workloads are {}", known.join(", "));
        }
    }
    let plan = Plan::new(quick);
    eprintln!("xtask: building torchlight-bench (release)");
    let mut build = cargo();
    build.current_dir(root).args(["build", "--release", "-p", "torchlight-bench"]);
    if distributed {
        build.args(["--features", "distributed"]);
    }
    let status = build.status()?;
    check(status, "cargo build -p torchlight-bench")?;
    let bin = target_dir.join("release/torchlight-bench");
    let out = target_dir.join("bench");
    let data = out.join(format!("data/photos_{}", plan.images));
    let scratch = out.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    eprintln!("xtask: photo-like ImageFolder of {} JPEGs at {}", plan.images, data.display());
    let status = Command::new(&bin)
        .args(["gen-data", "--out"])
        .arg(&data)
        .args(["--count", &plan.images.to_string()])
        .status()
        .with_context(|| format!("could not run {}", bin.display()))?;
    check(status, "generating the image set")?;
    let text = out.join("data/text_corpus");
    eprintln!("xtask: text corpus at {}", text.display());
    let status = Command::new(&bin)
        .args(["gen-text", "--out"])
        .arg(&text)
        .status()
        .with_context(|| format!("could not run {}", bin.display()))?;
    check(status, "generating the text corpus")?;

    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).to_string();
    let mut tl_cmd = Command::new(&bin);
    tl_cmd
        .args(["serve", "--threads", &threads, "--data"])
        .arg(&data)
        .arg("--scratch")
        .arg(&scratch)
        .arg("--text")
        .arg(&text);
    let python = root.join(".pyref/bin/python");
    let mut pt_cmd = Command::new(&python);
    pt_cmd
        .arg(root.join("crates/bench/pytorch_bench.py"))
        .args(["--threads", &threads, "--data"])
        .arg(&data)
        .arg("--scratch")
        .arg(&scratch)
        .arg("--text")
        .arg(&text)
        // The same intra-op pool size for both sides; nothing else decides it. `cargo run`
        // puts libtorch and the target folder on LD_LIBRARY_PATH, which is not Python's.
        .env_remove("OMP_NUM_THREADS")
        .env_remove("MKL_NUM_THREADS")
        .env_remove("LD_LIBRARY_PATH");
    let mut servers = [Server::start("torchlight", tl_cmd)?, Server::start("pytorch", pt_cmd)?];
    eprintln!("xtask: {} | {}", servers[0].banner, servers[1].banner);

    let mut raw = String::new();
    raw.push_str(&format!("#threads={threads}\n#mode={}\n", if quick { "quick" } else { "full" }));
    raw.push_str(&format!(
        "#images={}\n#rounds={}\n#libtorch=2.11.0\n#tch=0.24.0\n",
        plan.images, plan.rounds
    ));
    for key in ["torch", "torchvision"] {
        raw.push_str(&format!("#{key}={}\n", servers[1].banner_value(key).unwrap_or("?")));
    }
    for w in WORKLOADS.iter().filter(|w| only.as_ref().is_none_or(|o| o.iter().any(|n| n == w.name))) {
        let reps = if w.heavy { plan.heavy_reps } else { plan.light_reps };
        let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut failed = [false, false];
        for round in 0..plan.rounds {
            // Round 0 warms up; the side that goes first alternates.
            let warmup = if round == 0 { 1 } else { 0 };
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                if failed[side] {
                    continue;
                }
                match servers[side].run(w.name, warmup, reps) {
                    Ok(t) => times[side].extend(t),
                    Err(e) => {
                        eprintln!("xtask: {e:#}");
                        failed[side] = true;
                        times[side].clear();
                    }
                }
            }
        }
        let median = |t: &[f64]| {
            let mut s = t.to_vec();
            s.sort_by(f64::total_cmp);
            s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
        };
        eprintln!(
            "xtask: {:<28} torchlight {:>9.4} s  pytorch {:>9.4} s",
            w.name,
            median(&times[0]),
            median(&times[1])
        );
        let join = |t: &[f64]| t.iter().map(|x| format!("{x:.9}")).collect::<Vec<_>>().join(" ");
        raw.push_str(&format!("{}\t{}\t{}\t{}\n", w.name, w.description, join(&times[0]), join(&times[1])));
    }
    if only.as_ref().is_none_or(|o| o.iter().any(|n| n.starts_with("pipeline"))) {
        raw.push_str(&format!("#stage_images={STAGE_IMAGES}\n"));
        for pipeline in ["train", "eval", "policy"] {
            for round in 0..2 {
                let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
                for side in order {
                    match servers[side].stages(pipeline, STAGE_IMAGES) {
                        Ok(stages) => {
                            eprintln!("xtask: stages {pipeline:<5} {:<10} {stages}", servers[side].label);
                            raw.push_str(&format!(
                                "@stages\t{pipeline}\t{}\t{stages}\n",
                                servers[side].label
                            ));
                        }
                        Err(e) => eprintln!("xtask: {e:#}"),
                    }
                }
            }
        }
    }
    for server in servers {
        server.finish();
    }
    let raw_path = out.join("raw.tsv");
    std::fs::write(&raw_path, raw)?;
    let mut report = Command::new(&bin);
    report.args(["report", "--raw"]).arg(&raw_path).arg("--out-dir").arg(&out);
    // A partial run must not replace the full report in docs/.
    if only.is_none() {
        report.arg("--docs").arg(root.join("docs"));
    }
    check(report.status()?, "writing the report")?;
    if only.is_none() {
        eprintln!(
            "xtask: wrote {}, {} and {}",
            out.join("report.json").display(),
            root.join("docs/benchmarks.md").display(),
            root.join("docs/benchmarks.png").display()
        );
    } else {
        eprintln!("xtask: wrote {} (docs/ left alone: --only)", out.join("report.json").display());
    }
    Ok(())
}
