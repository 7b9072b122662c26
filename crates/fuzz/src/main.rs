//! `torchlight-fuzz`: a longer fuzz run than the test suite's (`cargo xtask fuzz --cases N`).

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Instant;
use torchlight_fuzz::{corpus, run_range, Finding, Target};

const USAGE: &str = "\
usage: torchlight-fuzz [--cases N] [--target pth|safetensors|image|all] [--seed S] [--from I] [--out DIR]

Runs N mutated cases (default 10000) per target, case numbers I..I+N, from run seed S
(default 1). Inputs that panicked are written to DIR (default target/fuzz) as
<target>-<seed>-<case>.bin; replay one with --seed S --from CASE --cases 1.";

fn value<T: std::str::FromStr>(args: &[String], flag: &str, default: T) -> Result<T> {
    match args.iter().position(|a| a == flag) {
        None => Ok(default),
        Some(i) => {
            let text = args.get(i + 1).with_context(|| format!("{flag} needs a value\n\n{USAGE}"))?;
            text.parse().map_err(|_| anyhow::anyhow!("{flag} {text}: not a valid value\n\n{USAGE}"))
        }
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    let known = ["--cases", "--target", "--seed", "--from", "--out"];
    if let Some(unknown) = args.iter().step_by(2).find(|a| !known.contains(&a.as_str())) {
        bail!("unknown option `{unknown}`\n\n{USAGE}");
    }
    let cases: u64 = value(&args, "--cases", 10_000)?;
    let seed: u64 = value(&args, "--seed", 1)?;
    let from: u64 = value(&args, "--from", 0)?;
    let out: PathBuf = value(&args, "--out", PathBuf::from("target/fuzz"))?;
    let target: String = value(&args, "--target", "all".to_string())?;
    let targets: Vec<Target> = match target.as_str() {
        "all" => Target::ALL.to_vec(),
        name => {
            vec![Target::from_name(name).with_context(|| format!("--target {name}: unknown\n\n{USAGE}"))?]
        }
    };
    let work = std::env::temp_dir().join(format!("torchlight-fuzz-{}", std::process::id()));
    let mut escaped = 0;
    for target in targets {
        let seeds = corpus(target).with_context(|| format!("reading the {} corpus", target.name()))?;
        let started = Instant::now();
        let report = run_range(target, &seeds, from..from + cases, seed, &work)?;
        println!(
            "{:12} {} cases in {:.1} s: {} accepted, {} refused with an error, {} panicked",
            target.name(),
            report.cases,
            started.elapsed().as_secs_f64(),
            report.accepted,
            report.rejected,
            report.failures.len()
        );
        for failure in &report.failures {
            std::fs::create_dir_all(&out)?;
            let file = out.join(format!("{}-{seed}-{}.bin", target.name(), failure.case));
            std::fs::write(&file, &failure.input)?;
            let (kind, message) = match &failure.finding {
                Finding::Escaped(m) => {
                    escaped += 1;
                    ("ESCAPED", m)
                }
                Finding::Contained(m) => ("contained", m),
            };
            println!("  {kind} panic, case {} ({}): {message}", failure.case, file.display());
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    if escaped > 0 {
        bail!("{escaped} panics escaped a reader's API");
    }
    Ok(())
}
