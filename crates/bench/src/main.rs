//! `torchlight-bench`: the Torchlight side of `cargo xtask bench`, and its report writer.
//!
//! - `serve --threads T --data DIR --scratch DIR --text DIR`: reads `run <workload> <warmup> <reps>`
//!   lines on stdin and answers each with `ok <seconds>...` (one time per repetition) or
//!   `err <message>`; workloads are built on first use and kept, so later rounds time only the
//!   work; `stages <train|eval|policy> <images>` answers `ok <stage>=<ms per image>...` (`stages.rs`).
//!   `pytorch_bench.py` speaks the same protocol for PyTorch.
//! - `gen-data --out DIR --count N`: the photo-like ImageFolder (cached).
//! - `gen-text --out DIR`: the text rows' corpus of `.txt` documents (cached; `text.rs`).
//! - `report --raw FILE --out-dir DIR [--docs DIR]`: statistics, table, JSON, Markdown, PNG.
//! - `gpu probe|run|summarize|validate|record ...`: the GPU proof kit's rows and report
//!   (`gpu.rs`, `gpu_report.rs`; `cargo xtask gpu-kit`).
//! - `allreduce-peer`: rank 1 of the all-reduce rows, started by the server (`allreduce.rs`).

mod allreduce;
mod args;
mod bench_file;
mod common;
mod format;
mod gpu;
mod gpu_report;
mod imagegen;
mod report;
mod stages;
mod stats;
mod text;
mod workloads;

use anyhow::{bail, Context, Result};
use args::{options, required};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    if let Err(err) = run() {
        eprintln!("torchlight-bench: error: {err:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        bail!("usage: torchlight-bench serve|gen-data|gen-text|report|gpu|allreduce-peer [--key value]..");
    };
    if command == "gpu" {
        return gpu::main(rest);
    }
    if command == "allreduce-peer" {
        return allreduce::peer_main();
    }
    let opts = options(rest)?;
    match command.as_str() {
        "serve" => serve(
            required(&opts, "threads")?.parse().context("--threads")?,
            workloads::Env {
                data: PathBuf::from(required(&opts, "data")?),
                scratch: PathBuf::from(required(&opts, "scratch")?),
                text: PathBuf::from(required(&opts, "text")?),
            },
        ),
        "gen-data" => imagegen::write_photo_folder(
            &PathBuf::from(required(&opts, "out")?),
            required(&opts, "count")?.parse().context("--count")?,
            10,
        ),
        "gen-text" => text::write_corpus(&PathBuf::from(required(&opts, "out")?)),
        "report" => {
            let raw = PathBuf::from(required(&opts, "raw")?);
            let text = std::fs::read_to_string(&raw).with_context(|| format!("{}", raw.display()))?;
            let report = report::parse_raw(&text)?;
            let docs = opts.get("docs").map(PathBuf::from);
            let table =
                report::write_all(&report, &PathBuf::from(required(&opts, "out-dir")?), docs.as_deref())?;
            print!("{table}");
            Ok(())
        }
        other => bail!("unknown command `{other}`"),
    }
}

/// Times `reps` repetitions of a workload after `warmup` untimed ones.
fn time(workload: &mut dyn workloads::Workload, warmup: usize, reps: usize) -> Result<Vec<f64>> {
    for _ in 0..warmup {
        workload.run()?;
    }
    (0..reps)
        .map(|_| {
            let start = Instant::now();
            workload.run()?;
            Ok(start.elapsed().as_secs_f64())
        })
        .collect()
}

fn serve(threads: i32, env: workloads::Env) -> Result<()> {
    tch::set_num_threads(threads);
    let mut built: HashMap<String, Box<dyn workloads::Workload>> = HashMap::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready threads={}", tch::get_num_threads())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let parts: Vec<&str> = line.split_whitespace().collect();
        let reply = match parts.as_slice() {
            ["quit"] => break,
            ["run", name, warmup, reps] => {
                let result = (|| -> Result<Vec<f64>> {
                    let (warmup, reps) = (warmup.parse()?, reps.parse()?);
                    if !built.contains_key(*name) {
                        built.insert(name.to_string(), workloads::build(name, &env)?);
                    }
                    let workload = built.get_mut(*name).expect("just built");
                    time(workload.as_mut(), warmup, reps)
                })();
                match result {
                    Ok(times) => {
                        let times: Vec<String> = times.iter().map(|t| format!("{t:.9}")).collect();
                        format!("ok {}", times.join(" "))
                    }
                    Err(e) => format!("err {}", format!("{e:#}").replace('\n', " ")),
                }
            }
            ["stages", pipeline, images] => {
                let result = images
                    .parse()
                    .map_err(anyhow::Error::from)
                    .and_then(|images| stages::measure(&env.data, pipeline, images));
                match result {
                    Ok(stages) => {
                        let stages: Vec<String> =
                            stages.iter().map(|(s, ms)| format!("{s}={ms:.6}")).collect();
                        format!("ok {}", stages.join(" "))
                    }
                    Err(e) => format!("err {}", format!("{e:#}").replace('\n', " ")),
                }
            }
            _ => format!("err bad request `{line}`"),
        };
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    allreduce::shutdown()
}
