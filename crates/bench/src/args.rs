//! The `--key value` options of the subcommands, shared by `main.rs` and `gpu.rs`.

use anyhow::{bail, Context, Result};
use std::collections::HashMap;

/// `--key value` options after the subcommand.
pub fn options(args: &[String]) -> Result<HashMap<String, String>> {
    let mut map = HashMap::new();
    let mut it = args.iter();
    while let Some(key) = it.next() {
        let Some(name) = key.strip_prefix("--") else { bail!("unexpected argument `{key}`") };
        let value = it.next().with_context(|| format!("`{key}` needs a value"))?;
        map.insert(name.to_string(), value.clone());
    }
    Ok(map)
}

/// The value of `--key`, or an error naming the missing option.
pub fn required<'a>(opts: &'a HashMap<String, String>, key: &str) -> Result<&'a str> {
    opts.get(key).map(String::as_str).with_context(|| format!("missing `--{key}`"))
}
