//! `cargo xtask evidence`: the recipes' evidence table (docs/recipes/README.md). Each recipe
//! of `docs/recipes/` is run by `torchlight train --config` and by the plain PyTorch script
//! beside it (`docs/recipes/evidence.py`), on the demo's generated five-shape set (`source/`
//! of `torchlight demo-data`: its `train/` to train and validate on, its `val/` as the test
//! split), with the same epochs, seeds, image size, batch and loader workers, one after the
//! other on this machine. The table is printed and written to `target/evidence/table.md`.

use crate::demo::{newest_run, torchlight};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// The table's settings: the recipes' own epochs and batch (10, 32) at the bench's 32 px.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub epochs: usize,
    pub seeds: Vec<u64>,
    pub image_size: u32,
    pub per_class: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { epochs: 10, seeds: vec![0], image_size: 32, per_class: 240 }
    }
}

impl Options {
    /// `--epochs=N`, `--seeds=A,B`, `--image-size=N`, `--per-class=N`.
    pub fn parse(flags: &[String]) -> Result<Self> {
        let mut o = Options::default();
        for flag in flags {
            let (key, value) =
                flag.split_once('=').with_context(|| format!("`{flag}`: expected --key=value"))?;
            let number =
                |v: &str| v.parse::<u64>().with_context(|| format!("`{flag}`: `{v}` is not a whole number"));
            match key {
                "--epochs" => o.epochs = number(value)? as usize,
                "--image-size" => o.image_size = number(value)? as u32,
                "--per-class" => o.per_class = number(value)? as usize,
                "--seeds" => o.seeds = value.split(',').map(number).collect::<Result<_>>()?,
                _ => bail!("unknown option `{flag}` for `evidence`"),
            }
        }
        if o.epochs < 2 {
            bail!("--epochs={}: the recipes warm up for one epoch, so at least 2", o.epochs);
        }
        if o.seeds.is_empty() || o.image_size == 0 || o.per_class < 10 {
            bail!("--seeds needs a seed, --image-size a side above 0, --per-class at least 10");
        }
        Ok(o)
    }
}

/// One side's figures for one recipe and seed.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    test_acc: f64,
    best_epoch: u64,
    wall_s: f64,
    images_per_s: f64,
}

fn json_number(v: &serde_json::Value, key: &str, what: &str) -> Result<f64> {
    v.get(key).and_then(serde_json::Value::as_f64).with_context(|| format!("{what} has no numeric `{key}`"))
}

/// Torchlight's row from a finished run folder's summary.json and the process's wall time.
/// `train_images`: the training split's size, which the script reports; both sides hold out
/// `max(1, round(n / 10))` images of each class of n, so the sizes are the same.
fn torchlight_row(run: &Path, wall_s: f64, train_images: f64) -> Result<Row> {
    let path = run.join("summary.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let what = path.display().to_string();
    let ema = v.get("ema_selected").and_then(serde_json::Value::as_bool).unwrap_or(false);
    let best_epoch = json_number(&v, if ema { "best_ema_epoch" } else { "best_epoch" }, &what)? as u64;
    let epochs = json_number(&v, "epochs", &what)?;
    Ok(Row {
        test_acc: json_number(&v, "test_acc", &what)?,
        best_epoch,
        wall_s,
        images_per_s: train_images * epochs / wall_s,
    })
}

/// PyTorch's row from the script's one JSON line, and the training split's size.
fn pytorch_row(stdout: &str) -> Result<(Row, f64)> {
    let line =
        stdout.lines().rev().find(|l| l.starts_with('{')).context("evidence.py printed no JSON line")?;
    let v: serde_json::Value = serde_json::from_str(line).context("evidence.py's JSON line")?;
    let what = "evidence.py's output";
    let wall_s = json_number(&v, "wall_s", what)?;
    let train_images = json_number(&v, "train_images", what)?;
    let row = Row {
        test_acc: json_number(&v, "test_acc", what)?,
        best_epoch: json_number(&v, "best_epoch", what)? as u64,
        wall_s,
        images_per_s: train_images * json_number(&v, "epochs", what)? / wall_s,
    };
    Ok((row, train_images))
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    v.iter().sum::<f64>() / v.len() as f64
}

/// The markdown table: one line per recipe and side, means over the seeds (best epochs listed).
fn table(rows: &[(&str, &str, Vec<Row>)], o: &Options) -> String {
    let mut s = String::from(
        "| recipe | run by | test accuracy (per seed) | best epoch | wall time | images/s |\n\
         |---|---|---|---|---|---|\n",
    );
    for (recipe, side, rs) in rows {
        let epochs: Vec<String> = rs.iter().map(|r| r.best_epoch.to_string()).collect();
        let accs: Vec<String> = rs.iter().map(|r| format!("{:.2}", 100.0 * r.test_acc)).collect();
        s += &format!(
            "| {recipe} | {side} | {:.2}% ({}) | {} | {:.1} s | {:.0} |\n",
            100.0 * mean(rs.iter().map(|r| r.test_acc)),
            accs.join(", "),
            epochs.join(", "),
            mean(rs.iter().map(|r| r.wall_s)),
            mean(rs.iter().map(|r| r.images_per_s)),
        );
    }
    let seeds: Vec<String> = o.seeds.iter().map(u64::to_string).collect();
    s += &format!(
        "\nresnet18 from scratch at {0} px, {1} epochs, batch 32, 2 loader workers, seed(s) {2} \
         (means over the seeds; test accuracies and best epochs per seed); {3} images per class in train/ \
         (a tenth held out for validation), a quarter of that in test/.\n",
        o.image_size,
        o.epochs,
        seeds.join(", "),
        o.per_class
    );
    s
}

pub fn evidence(root: &Path, target_dir: &Path, cargo: impl Fn() -> Command, o: Options) -> Result<()> {
    eprintln!("xtask: building the torchlight command (release)");
    let status = cargo().current_dir(root).args(["build", "--release", "-p", "torchlight-cli"]).status()?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    let bin = target_dir.join("release/torchlight");
    let python = root.join(".pyref/bin/python");
    let script = root.join("docs/recipes/evidence.py");
    let dir = target_dir.join("evidence");
    let data = dir.join(format!("data-{}", o.per_class));
    let d = |p: &Path| p.display().to_string();
    if !data.join("source/val").is_dir() {
        torchlight(&bin, &["demo-data", "--out", &d(&data), "--per-class", &o.per_class.to_string()])?;
    }
    // The evidence set: source/train to train (and validate) on, source/val as its test split.
    let set = dir.join(format!("set-{}", o.per_class));
    std::fs::create_dir_all(&set).with_context(|| d(&set))?;
    for (link, to) in [("train", "source/train"), ("test", "source/val")] {
        let (link, to) = (set.join(link), data.join(to));
        if std::fs::read_link(&link).ok() != Some(to.clone()) {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&to, &link).with_context(|| d(&link))?;
        }
    }
    let runs = dir.join("runs");
    if runs.exists() {
        std::fs::remove_dir_all(&runs).with_context(|| d(&runs))?;
    }
    let (epochs, size) = (o.epochs.to_string(), o.image_size.to_string());
    let mut rows = Vec::new();
    for recipe in ["plain", "modern"] {
        let config = d(&root.join(format!("docs/recipes/{recipe}.toml")));
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for &seed in &o.seeds {
            let seed = seed.to_string();
            let out = runs.join(format!("pytorch-{recipe}-{seed}"));
            let args = [
                d(&script),
                "--recipe".into(),
                recipe.into(),
                "--data".into(),
                d(&set),
                "--image-size".into(),
                size.clone(),
                "--epochs".into(),
                epochs.clone(),
                "--batch-size".into(),
                "32".into(),
                "--workers".into(),
                "2".into(),
                "--seed".into(),
                seed.clone(),
                "--out".into(),
                d(&out),
            ];
            eprintln!("\n$ {} {}", python.display(), args.join(" "));
            let output = Command::new(&python)
                .args(&args)
                .output()
                .with_context(|| format!("could not run {} (run `cargo xtask setup`)", python.display()))?;
            if !output.status.success() {
                bail!("evidence.py failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr));
            }
            // The script's per-epoch lines (stderr), then its result line.
            eprint!("{}", String::from_utf8_lossy(&output.stderr));
            let stdout = String::from_utf8_lossy(&output.stdout);
            eprintln!("{}", stdout.trim());
            let (row, train_images) = pytorch_row(&stdout)?;
            theirs.push(row);
            let out = runs.join(format!("torchlight-{recipe}-{seed}"));
            let started = Instant::now();
            torchlight(
                &bin,
                &[
                    "train",
                    "--data",
                    &d(&set),
                    "--config",
                    &config,
                    "--epochs",
                    &epochs,
                    "--image-size",
                    &size,
                    "--batch-size",
                    "32",
                    "--workers",
                    "2",
                    "--seed",
                    &seed,
                    "--device",
                    "cpu",
                    "--out",
                    &d(&out),
                ],
            )?;
            let wall = started.elapsed().as_secs_f64();
            ours.push(torchlight_row(&newest_run(&out)?, wall, train_images)?);
        }
        rows.push((recipe, "Torchlight", ours));
        rows.push((recipe, "PyTorch script", theirs));
    }
    let table = table(&rows, &o);
    let file = dir.join("table.md");
    std::fs::write(&file, &table).with_context(|| d(&file))?;
    println!("\n{table}\n(written to {})", file.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_refuse_what_they_cannot_run() {
        assert_eq!(Options::parse(&[]).unwrap(), Options::default());
        let o = Options::parse(&["--epochs=3".into(), "--seeds=0,1,2".into()]).unwrap();
        assert_eq!((o.epochs, o.seeds), (3, vec![0, 1, 2]));
        for bad in ["--epochs=1", "--seeds=", "--per-class=x", "--frobs=1", "--epochs"] {
            assert!(Options::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_pytorch_row_comes_from_the_scripts_last_json_line() {
        let out = "some warning\n{\"test_acc\": 0.9, \"best_epoch\": 7, \"train_images\": 100, \"epochs\": 10, \"wall_s\": 50.0}\n";
        let (r, n) = pytorch_row(out).unwrap();
        assert_eq!(r, Row { test_acc: 0.9, best_epoch: 7, wall_s: 50.0, images_per_s: 20.0 });
        assert_eq!(n, 100.0);
        assert!(pytorch_row("no json").is_err());
    }

    #[test]
    fn the_table_averages_over_seeds_and_lists_each_best_epoch() {
        let r = |acc, epoch| Row { test_acc: acc, best_epoch: epoch, wall_s: 10.0, images_per_s: 100.0 };
        let o = Options { seeds: vec![0, 1], ..Options::default() };
        let t = table(&[("plain", "Torchlight", vec![r(0.9, 8), r(0.8, 9)])], &o);
        assert!(t.contains("| plain | Torchlight | 85.00% (90.00, 80.00) | 8, 9 | 10.0 s | 100 |"), "{t}");
    }
}
