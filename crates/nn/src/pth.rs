//! A safe reader for PyTorch `.pth` state_dicts (`torch.save(model.state_dict(), path)`).
//!
//! Since PyTorch 1.6 such a file is a zip archive: `<name>/data.pkl` is a pickle (protocol 2)
//! of an `OrderedDict` mapping keys to tensors, and each tensor's storage is a raw
//! little-endian entry `<name>/data/<key>`. tch cannot read these (it fails on
//! `isGenericDict`), and Python's unpickler would execute arbitrary code. This reader runs a
//! small pickle machine that knows only the opcodes a state_dict uses and only the globals
//! that rebuild tensors; anything else is an error naming the opcode or global, so a
//! malicious or unusual file can never run code here.

use crate::error::{NnError, Result};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use tch::{Kind, Tensor};

/// A pickle value, restricted to what a state_dict holds.
#[derive(Debug, Clone)]
enum Value {
    None,
    #[allow(dead_code)] // read through Debug, in error messages
    Bool(bool),
    Int(i64),
    #[allow(dead_code)] // read through Debug, in error messages
    Float(f64),
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    /// An allowed global (callable or storage type).
    Global(Global),
    /// A storage reference from a persistent id: dtype, entry key, element count.
    Storage {
        kind: Kind,
        key: String,
        numel: i64,
    },
    /// A tensor view of a storage.
    Tensor(TensorRef),
    Mark,
    /// An object of a global outside the allow-list (`pathlib.PosixPath`, Lightning's
    /// `AttributeDict`, ...), read by a container reader next to a state_dict: recorded by its
    /// global's name, never imported or called.
    Opaque(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Global {
    OrderedDict,
    RebuildTensorV2,
    RebuildParameter,
    StorageType(Kind),
}

#[derive(Debug, Clone)]
struct TensorRef {
    kind: Kind,
    key: String,
    storage_numel: i64,
    offset: i64,
    size: Vec<i64>,
    stride: Vec<i64>,
}

fn global(module: &str, name: &str) -> std::result::Result<Global, String> {
    let storage = |kind| Ok(Global::StorageType(kind));
    match (module, name) {
        ("collections", "OrderedDict") => Ok(Global::OrderedDict),
        ("torch._utils", "_rebuild_tensor_v2") => Ok(Global::RebuildTensorV2),
        ("torch._utils", "_rebuild_parameter") => Ok(Global::RebuildParameter),
        ("torch", "FloatStorage") => storage(Kind::Float),
        ("torch", "DoubleStorage") => storage(Kind::Double),
        ("torch", "HalfStorage") => storage(Kind::Half),
        ("torch", "BFloat16Storage") => storage(Kind::BFloat16),
        ("torch", "LongStorage") => storage(Kind::Int64),
        ("torch", "IntStorage") => storage(Kind::Int),
        ("torch", "ShortStorage") => storage(Kind::Int16),
        ("torch", "CharStorage") => storage(Kind::Int8),
        ("torch", "ByteStorage") => storage(Kind::Uint8),
        ("torch", "BoolStorage") => storage(Kind::Bool),
        _ => Err(format!(
            "refusing pickle global `{module}.{name}`: only state_dicts of tensors can be loaded \
             (save with `torch.save(model.state_dict(), path)`)"
        )),
    }
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    memo: HashMap<u32, Value>,
    /// Globals outside the allow-list become [`Value::Opaque`] instead of an error (reading a
    /// checkpoint that holds a state_dict among other objects).
    opaque_globals: bool,
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| format!("data.pkl ends inside an opcode at byte {}", self.pos))?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }
    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn line(&mut self) -> std::result::Result<String, String> {
        let rest = &self.data[self.pos..];
        let n = rest.iter().position(|&b| b == b'\n').ok_or("unterminated GLOBAL line in data.pkl")?;
        let text = String::from_utf8(rest[..n].to_vec()).map_err(|_| "non-UTF-8 GLOBAL name in data.pkl")?;
        self.pos += n + 1;
        Ok(text)
    }
    fn pop(&mut self) -> std::result::Result<Value, String> {
        self.stack.pop().ok_or_else(|| "pickle stack underflow in data.pkl".to_string())
    }
    fn pop_mark(&mut self) -> std::result::Result<Vec<Value>, String> {
        let at = self
            .stack
            .iter()
            .rposition(|v| matches!(v, Value::Mark))
            .ok_or("pickle MARK missing in data.pkl")?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items)
    }
    fn top_mut(&mut self) -> std::result::Result<&mut Value, String> {
        self.stack.last_mut().ok_or_else(|| "pickle stack underflow in data.pkl".to_string())
    }

    fn run(mut self) -> std::result::Result<Value, String> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(format!("pickle protocol {proto} is not supported"));
                    }
                }
                b'}' => self.stack.push(Value::Dict(Vec::new())),
                b']' => self.stack.push(Value::List(Vec::new())),
                b')' => self.stack.push(Value::Tuple(Vec::new())),
                b'(' => self.stack.push(Value::Mark),
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'M' => {
                    let v = self.u16()?;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                0x8a => {
                    let n = usize::from(self.u8()?);
                    let bytes = self.take(n)?;
                    if n > 8 {
                        return Err(format!("integer of {n} bytes in data.pkl is too large"));
                    }
                    let mut buf = if bytes.last().is_some_and(|b| b & 0x80 != 0) { [0xff; 8] } else { [0; 8] };
                    buf[..n].copy_from_slice(bytes);
                    self.stack.push(Value::Int(i64::from_le_bytes(buf)));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes"));
                    self.stack.push(Value::Float(v));
                }
                b'X' | 0x8c | b'U' | b'T' => {
                    let n = match op {
                        b'X' | b'T' => self.u32()? as usize,
                        _ => usize::from(self.u8()?),
                    };
                    let bytes = self.take(n)?;
                    let s = String::from_utf8(bytes.to_vec()).map_err(|_| format!("non-UTF-8 string at byte {at}"))?;
                    self.stack.push(Value::Str(s));
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let value = match global(&module, &name) {
                        Ok(g) => Value::Global(g),
                        Err(_) if self.opaque_globals => Value::Opaque(format!("{module}.{name}")),
                        Err(e) => return Err(e),
                    };
                    self.stack.push(value);
                }
                0x81 if self.opaque_globals => {
                    // NEWOBJ: `cls.__new__(cls, *args)` of a class, kept opaque.
                    let _args = self.pop()?;
                    let class = self.pop()?;
                    self.stack.push(opaque_result(class)?);
                }
                b'0' if self.opaque_globals => {
                    self.pop()?;
                }
                b'1' if self.opaque_globals => {
                    self.pop_mark()?;
                }
                b'q' => {
                    let k = u32::from(self.u8()?);
                    let v = self.top_mut()?.clone();
                    self.memo.insert(k, v);
                }
                b'r' => {
                    let k = self.u32()?;
                    let v = self.top_mut()?.clone();
                    self.memo.insert(k, v);
                }
                0x94 => {
                    let k = self.memo.len() as u32;
                    let v = self.top_mut()?.clone();
                    self.memo.insert(k, v);
                }
                b'h' | b'j' => {
                    let k = if op == b'h' { u32::from(self.u8()?) } else { self.u32()? };
                    let v = self.memo.get(&k).cloned().ok_or_else(|| format!("pickle memo {k} is not set"))?;
                    self.stack.push(v);
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return Err("pickle stack underflow in data.pkl".to_string());
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(Value::Tuple(items));
                }
                b'a' => {
                    let v = self.pop()?;
                    match self.top_mut()? {
                        Value::List(l) => l.push(v),
                        Value::Opaque(_) => {}
                        other => return Err(format!("APPEND to a non-list {other:?}")),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    match self.top_mut()? {
                        Value::List(l) => l.extend(items),
                        Value::Opaque(_) => {}
                        other => return Err(format!("APPENDS to a non-list {other:?}")),
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    match self.top_mut()? {
                        Value::Dict(d) => d.push((k, v)),
                        Value::Opaque(_) => {}
                        other => return Err(format!("SETITEM on a non-dict {other:?}")),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err("SETITEMS with an odd number of items".to_string());
                    }
                    let mut pairs = Vec::with_capacity(items.len() / 2);
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    match self.top_mut()? {
                        Value::Dict(d) => d.extend(pairs),
                        Value::Opaque(_) => {}
                        other => return Err(format!("SETITEMS on a non-dict {other:?}")),
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.stack.push(persistent_load(pid)?);
                }
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let value = match callable {
                        Value::Opaque(_) => opaque_result(callable)?,
                        callable => reduce(callable, args)?,
                    };
                    self.stack.push(value);
                }
                b'b' => {
                    // BUILD: an OrderedDict's `_metadata` (module versions) is the only state a
                    // state_dict carries; it is not needed to load tensors.
                    let _state = self.pop()?;
                    match self.top_mut()? {
                        Value::Dict(_) | Value::Tensor(_) | Value::Opaque(_) => {}
                        other => return Err(format!("BUILD on unsupported object {other:?}")),
                    }
                }
                b'.' => return self.pop(),
                other => {
                    return Err(format!(
                        "unsupported pickle opcode 0x{other:02x} at byte {at} of data.pkl (not a plain state_dict)"
                    ))
                }
            }
        }
    }
}

fn persistent_load(pid: Value) -> std::result::Result<Value, String> {
    let Value::Tuple(items) = pid else {
        return Err(format!("unexpected persistent id {pid:?}"));
    };
    match items.as_slice() {
        [Value::Str(tag), Value::Global(Global::StorageType(kind)), Value::Str(key), _location, Value::Int(numel)]
            if tag == "storage" =>
        {
            Ok(Value::Storage { kind: *kind, key: key.clone(), numel: *numel })
        }
        _ => Err(format!("unexpected persistent id {items:?}")),
    }
}

/// What calling or instantiating an opaque global gives: an opaque object of that name.
fn opaque_result(callable: Value) -> std::result::Result<Value, String> {
    match callable {
        Value::Opaque(name) => Ok(Value::Opaque(name)),
        other => Err(format!("cannot instantiate {}", short(&other))),
    }
}

fn ints(v: &Value, what: &str) -> std::result::Result<Vec<i64>, String> {
    match v {
        Value::Tuple(items) | Value::List(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => Ok(*n),
                other => Err(format!("{what} holds a non-integer {other:?}")),
            })
            .collect(),
        other => Err(format!("{what} is not a tuple: {other:?}")),
    }
}

fn reduce(callable: Value, args: Value) -> std::result::Result<Value, String> {
    let Value::Tuple(args) = args else {
        return Err(format!("REDUCE arguments are not a tuple: {args:?}"));
    };
    match callable {
        Value::Global(Global::OrderedDict) => Ok(Value::Dict(Vec::new())),
        Value::Global(Global::RebuildTensorV2) => match args.as_slice() {
            [Value::Storage { kind, key, numel }, Value::Int(offset), size, stride, ..] => {
                Ok(Value::Tensor(TensorRef {
                    kind: *kind,
                    key: key.clone(),
                    storage_numel: *numel,
                    offset: *offset,
                    size: ints(size, "tensor size")?,
                    stride: ints(stride, "tensor stride")?,
                }))
            }
            _ => Err(format!("_rebuild_tensor_v2 with unexpected arguments {args:?}")),
        },
        Value::Global(Global::RebuildParameter) => match args.into_iter().next() {
            Some(t @ Value::Tensor(_)) => Ok(t),
            other => Err(format!("_rebuild_parameter of a non-tensor {other:?}")),
        },
        other => Err(format!("cannot call {other:?}")),
    }
}

/// Reads a `.pth` state_dict into `(key, tensor)` pairs in the file's order. Tensors are
/// contiguous CPU tensors with the saved dtype.
///
/// The file must hold a state_dict alone (`torch.save(model.state_dict(), path)`); a
/// checkpoint that holds one among other objects is read by [`read_pth_checkpoint`].
pub fn read_pth(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    read_pth_dict(path.as_ref(), false).map(|(tensors, _)| tensors)
}

/// The entries of a checkpoint dict that [`read_pth_checkpoint`] looks for a state_dict under,
/// in order: PyTorch Lightning's `state_dict`, the PyTorch tutorials' `model_state_dict`,
/// torchvision's reference scripts' `model`, then `module` and `net`.
pub const STATE_DICT_ENTRIES: &[&str] = &["state_dict", "model_state_dict", "model", "module", "net"];

/// Reads the state_dict of a `.pth` / `.pt` / `.ckpt` file that may hold more than one: a
/// plain state_dict, or a checkpoint dict with it under one of [`STATE_DICT_ENTRIES`]
/// (a PyTorch Lightning `.ckpt`, `{"model": ..., "optimizer": ..., "epoch": ...}`). Returns
/// the tensors and the entry they were under (`None` for a plain state_dict).
///
/// The same safe pickle machine as [`read_pth`] reads the file, except that objects of other
/// globals (Lightning's hyperparameter `AttributeDict`, `pathlib` paths, `argparse.Namespace`)
/// are kept as opaque names: nothing is imported or called, and only the chosen entry's
/// storages are read. Keys are as saved (`model.` / `module.` prefixes included; see
/// `LoadOptions::strip_wrappers`).
pub fn read_pth_checkpoint(path: impl AsRef<Path>) -> Result<(Vec<(String, Tensor)>, Option<String>)> {
    read_pth_dict(path.as_ref(), true)
}

/// The state_dict of a checkpoint's root: an entry of [`STATE_DICT_ENTRIES`] holding a dict,
/// else the root itself.
fn state_dict_entry(root: Value) -> std::result::Result<(Vec<(Value, Value)>, Option<String>), String> {
    let Value::Dict(items) = root else {
        return Err(format!("the top-level object is not a dict but {}", short(&root)));
    };
    for name in STATE_DICT_ENTRIES {
        let found =
            items.iter().position(|(k, v)| matches!((k, v), (Value::Str(k), Value::Dict(_)) if k == name));
        if let Some(at) = found {
            let Some((_, Value::Dict(entry))) = items.into_iter().nth(at) else {
                unreachable!("matched above")
            };
            return Ok((entry, Some(name.to_string())));
        }
    }
    let others: Vec<String> = items
        .iter()
        .filter(|(_, v)| !matches!(v, Value::Tensor(_)))
        .take(8)
        .map(|(k, v)| match k {
            Value::Str(k) => format!("`{k}`: {}", short(v)),
            k => short(k),
        })
        .collect();
    if !others.is_empty() {
        return Err(format!(
            "no state_dict found: the top-level dict holds non-tensors ({}) and none of the entries {}",
            others.join("; "),
            STATE_DICT_ENTRIES.join(", ")
        ));
    }
    Ok((items, None))
}

/// Reads the file's pickle and the tensors of its state_dict: the root dict, or with
/// `container` the entry [`state_dict_entry`] picks (other globals then kept opaque).
fn read_pth_dict(path: &Path, container: bool) -> Result<(Vec<(String, Tensor)>, Option<String>)> {
    let fail = |reason: String| NnError::Pth { path: path.to_path_buf(), reason };
    let file =
        std::fs::File::open(path).map_err(|source| NnError::Io { path: path.to_path_buf(), source })?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| {
        fail(format!("not a zip archive ({e}); files from torch.save before PyTorch 1.6 are not supported"))
    })?;
    let pkl_name = archive
        .file_names()
        .find(|n| n.ends_with("data.pkl") && n.matches('/').count() == 1)
        .map(str::to_string)
        .ok_or_else(|| fail("no <archive>/data.pkl entry".to_string()))?;
    let prefix = pkl_name.trim_end_matches("data.pkl").to_string();
    let read_entry = |archive: &mut zip::ZipArchive<std::fs::File>, name: &str| -> Result<Vec<u8>> {
        let mut entry = archive.by_name(name).map_err(|e| fail(format!("entry {name}: {e}")))?;
        let mut buf = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut buf)
            .map_err(|e| fail(format!("entry {name} is truncated or corrupt: {e}")))?;
        Ok(buf)
    };
    if let Ok(order) = read_entry(&mut archive, &format!("{prefix}byteorder")) {
        if order != b"little" {
            return Err(fail(format!("byte order `{}` is not supported", String::from_utf8_lossy(&order))));
        }
    }
    let pkl = read_entry(&mut archive, &pkl_name)?;
    let machine =
        Machine { data: &pkl, pos: 0, stack: Vec::new(), memo: HashMap::new(), opaque_globals: container };
    let root = machine.run().map_err(fail)?;
    let (items, entry) = if container {
        state_dict_entry(root).map_err(fail)?
    } else {
        let Value::Dict(items) = root else {
            return Err(fail(format!("the top-level object is not a dict but {}", short(&root))));
        };
        (items, None)
    };
    let mut storages: HashMap<String, Tensor> = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    for (k, v) in items {
        let Value::Str(key) = k else {
            return Err(fail(format!("a state_dict key is not a string: {}", short(&k))));
        };
        let Value::Tensor(t) = v else {
            return Err(fail(format!("value of `{key}` is not a tensor but {}", short(&v))));
        };
        if !storages.contains_key(&t.key) {
            let bytes = read_entry(&mut archive, &format!("{prefix}data/{}", t.key))?;
            let expected = t.storage_numel as usize * t.kind.elt_size_in_bytes();
            if bytes.len() != expected {
                return Err(fail(format!(
                    "storage {} of `{key}` has {} bytes, expected {expected}",
                    t.key,
                    bytes.len()
                )));
            }
            storages.insert(t.key.clone(), Tensor::from_data_size(&bytes, &[t.storage_numel], t.kind));
        }
        let storage = &storages[&t.key];
        let reach: i64 =
            t.offset + t.size.iter().zip(&t.stride).map(|(s, st)| (s - 1).max(0) * st).sum::<i64>();
        if t.size.len() != t.stride.len() || (t.size.iter().all(|&s| s > 0) && reach >= t.storage_numel) {
            return Err(fail(format!(
                "`{key}`: view {:?}/{:?} at {} exceeds its storage",
                t.size, t.stride, t.offset
            )));
        }
        out.push((key, storage.as_strided(t.size.as_slice(), t.stride.as_slice(), t.offset).contiguous()));
    }
    Ok((out, entry))
}

fn short(v: &Value) -> String {
    if let Value::Opaque(name) = v {
        return format!("an object of `{name}` (not rebuilt: only tensors load)");
    }
    let text = format!("{v:?}");
    if text.len() > 80 {
        format!("{}...", &text[..80])
    } else {
        text
    }
}
