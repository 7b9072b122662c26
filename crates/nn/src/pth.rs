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
use std::fmt;
use std::io::Read;
use std::path::Path;
use tch::{Kind, Tensor};

/// Tensors under their `state_dict` keys.
type NamedTensors = Vec<(String, Tensor)>;
/// A pickled dict's items, in order.
type Entries = Vec<(Value, Value)>;

/// The most values one `data.pkl` may create or copy (memo references copy). A real
/// state_dict needs some tens per tensor; the cap keeps a crafted pickle that references a
/// memo entry over and over (each copy twice the size of the last) from exhausting memory.
const MAX_NODES: usize = 1 << 22;
/// The deepest nesting of tuples, lists and dicts in `data.pkl`. A state_dict nests a few
/// levels; the cap keeps formatting and dropping a crafted structure off the call stack.
const MAX_DEPTH: usize = 100;

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
    Tuple(Nested<Value>),
    List(Nested<Value>),
    Dict(Nested<(Value, Value)>),
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

/// The items of a tuple, list or dict, with the size and depth of everything below them, so
/// the machine can bound both without walking the structure.
#[derive(Clone)]
struct Nested<T> {
    items: Vec<T>,
    /// Values in this container and below, itself included.
    nodes: usize,
    /// 1 + the deepest child's depth.
    depth: usize,
}

impl<T: fmt::Debug> fmt::Debug for Nested<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.items.fmt(f)
    }
}

impl Value {
    fn nodes(&self) -> usize {
        match self {
            Value::Tuple(n) | Value::List(n) => n.nodes,
            Value::Dict(n) => n.nodes,
            _ => 1,
        }
    }
    fn depth(&self) -> usize {
        match self {
            Value::Tuple(n) | Value::List(n) => n.depth,
            Value::Dict(n) => n.depth,
            _ => 0,
        }
    }
}

impl<T> Nested<T> {
    fn empty() -> Self {
        Nested { items: Vec::new(), nodes: 1, depth: 1 }
    }
}

fn nested(items: Vec<Value>) -> std::result::Result<Nested<Value>, String> {
    let mut n = Nested::empty();
    for v in items {
        push_item(&mut n, v)?;
    }
    Ok(n)
}

/// Appends `v` to `n`, keeping its size and depth and refusing to nest deeper than
/// [`MAX_DEPTH`].
fn push_item(n: &mut Nested<Value>, v: Value) -> std::result::Result<(), String> {
    n.depth = n.depth.max(v.depth() + 1);
    n.nodes += v.nodes();
    n.items.push(v);
    check_depth(n.depth)
}

fn push_pair(n: &mut Nested<(Value, Value)>, k: Value, v: Value) -> std::result::Result<(), String> {
    n.depth = n.depth.max(k.depth().max(v.depth()) + 1);
    n.nodes += k.nodes() + v.nodes();
    n.items.push((k, v));
    check_depth(n.depth)
}

fn check_depth(depth: usize) -> std::result::Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("data.pkl nests containers more than {MAX_DEPTH} deep (not a state_dict)"));
    }
    Ok(())
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
    /// Values this pickle may still create or copy (see [`MAX_NODES`]).
    nodes_left: usize,
    /// Globals outside the allow-list become [`Value::Opaque`] instead of an error (reading a
    /// checkpoint that holds a state_dict among other objects).
    opaque_globals: bool,
}

impl<'a> Machine<'a> {
    fn new(data: &'a [u8], opaque_globals: bool) -> Self {
        Machine {
            data,
            pos: 0,
            stack: Vec::new(),
            memo: HashMap::new(),
            nodes_left: MAX_NODES,
            opaque_globals,
        }
    }
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
    /// Accounts for `n` new or copied values against [`MAX_NODES`].
    fn charge(&mut self, n: usize) -> std::result::Result<(), String> {
        self.nodes_left = self.nodes_left.checked_sub(n).ok_or_else(|| {
            format!("data.pkl builds more than {MAX_NODES} values (not a plain state_dict)")
        })?;
        Ok(())
    }
    fn push(&mut self, v: Value) -> std::result::Result<(), String> {
        self.charge(1)?;
        self.stack.push(v);
        Ok(())
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
    fn memo_put(&mut self, k: u32) -> std::result::Result<(), String> {
        let nodes =
            self.stack.last().ok_or_else(|| "pickle stack underflow in data.pkl".to_string())?.nodes();
        // Charged before copying: a copy is as large as the value.
        self.charge(nodes)?;
        let v = self.stack.last().expect("checked above").clone();
        self.memo.insert(k, v);
        Ok(())
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
                b'}' => self.push(Value::Dict(Nested::empty()))?,
                b']' => self.push(Value::List(Nested::empty()))?,
                b')' => self.push(Value::Tuple(Nested::empty()))?,
                b'(' => self.push(Value::Mark)?,
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Value::Int(i64::from(v)))?;
                }
                0x8a => {
                    let n = usize::from(self.u8()?);
                    if n > 8 {
                        return Err(format!("integer of {n} bytes at byte {at} of data.pkl is too large"));
                    }
                    let bytes = self.take(n)?;
                    let mut buf = if bytes.last().is_some_and(|b| b & 0x80 != 0) { [0xff; 8] } else { [0; 8] };
                    buf[..n].copy_from_slice(bytes);
                    self.push(Value::Int(i64::from_le_bytes(buf)))?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes"));
                    self.push(Value::Float(v))?;
                }
                b'X' | 0x8c | b'U' | b'T' => {
                    let n = match op {
                        b'X' | b'T' => self.u32()? as usize,
                        _ => usize::from(self.u8()?),
                    };
                    let bytes = self.take(n)?;
                    let s = String::from_utf8(bytes.to_vec()).map_err(|_| format!("non-UTF-8 string at byte {at}"))?;
                    self.push(Value::Str(s))?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let value = match global(&module, &name) {
                        Ok(g) => Value::Global(g),
                        Err(_) if self.opaque_globals => Value::Opaque(format!("{module}.{name}")),
                        Err(e) => return Err(e),
                    };
                    self.push(value)?;
                }
                0x81 if self.opaque_globals => {
                    // NEWOBJ: `cls.__new__(cls, *args)` of a class, kept opaque.
                    let _args = self.pop()?;
                    let class = self.pop()?;
                    self.push(opaque_result(class)?)?;
                }
                b'0' if self.opaque_globals => {
                    self.pop()?;
                }
                b'1' if self.opaque_globals => {
                    self.pop_mark()?;
                }
                b'q' => {
                    let k = u32::from(self.u8()?);
                    self.memo_put(k)?;
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = self.memo.len() as u32;
                    self.memo_put(k)?;
                }
                b'h' | b'j' => {
                    let k = if op == b'h' { u32::from(self.u8()?) } else { self.u32()? };
                    let nodes = self.memo.get(&k).ok_or_else(|| format!("pickle memo {k} is not set"))?.nodes();
                    self.charge(nodes)?;
                    let v = self.memo[&k].clone();
                    self.stack.push(v);
                }
                b't' => {
                    let items = self.pop_mark()?;
                    let t = Value::Tuple(nested(items)?);
                    self.push(t)?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return Err("pickle stack underflow in data.pkl".to_string());
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let t = Value::Tuple(nested(items)?);
                    self.push(t)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    match self.top_mut()? {
                        Value::List(l) => push_item(l, v)?,
                        Value::Opaque(_) => {}
                        other => return Err(format!("APPEND to a non-list {}", short(other))),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    match self.top_mut()? {
                        Value::List(l) => {
                            for v in items {
                                push_item(l, v)?;
                            }
                        }
                        Value::Opaque(_) => {}
                        other => return Err(format!("APPENDS to a non-list {}", short(other))),
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    match self.top_mut()? {
                        Value::Dict(d) => push_pair(d, k, v)?,
                        Value::Opaque(_) => {}
                        other => return Err(format!("SETITEM on a non-dict {}", short(other))),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err("SETITEMS with an odd number of items".to_string());
                    }
                    let d = match self.top_mut()? {
                        Value::Dict(d) => d,
                        Value::Opaque(_) => continue,
                        other => return Err(format!("SETITEMS on a non-dict {}", short(other))),
                    };
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        push_pair(d, k, v)?;
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.push(persistent_load(pid)?)?;
                }
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let value = match callable {
                        Value::Opaque(_) => opaque_result(callable)?,
                        callable => reduce(callable, args)?,
                    };
                    self.push(value)?;
                }
                b'b' => {
                    // BUILD: an OrderedDict's `_metadata` (module versions) is the only state a
                    // state_dict carries; it is not needed to load tensors.
                    let _state = self.pop()?;
                    match self.top_mut()? {
                        Value::Dict(_) | Value::Tensor(_) | Value::Opaque(_) => {}
                        other => return Err(format!("BUILD on unsupported object {}", short(other))),
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

/// What calling or instantiating an opaque global gives: an opaque object of that name.
fn opaque_result(callable: Value) -> std::result::Result<Value, String> {
    match callable {
        Value::Opaque(name) => Ok(Value::Opaque(name)),
        other => Err(format!("cannot instantiate {}", short(&other))),
    }
}

fn persistent_load(pid: Value) -> std::result::Result<Value, String> {
    let Value::Tuple(items) = pid else {
        return Err(format!("unexpected persistent id {}", short(&pid)));
    };
    match items.items.as_slice() {
        [Value::Str(tag), Value::Global(Global::StorageType(kind)), Value::Str(key), _location, Value::Int(numel)]
            if tag == "storage" =>
        {
            Ok(Value::Storage { kind: *kind, key: key.clone(), numel: *numel })
        }
        _ => Err(format!("unexpected persistent id {}", short(&Value::Tuple(items)))),
    }
}

fn ints(v: &Value, what: &str) -> std::result::Result<Vec<i64>, String> {
    match v {
        Value::Tuple(items) | Value::List(items) => items
            .items
            .iter()
            .map(|i| match i {
                Value::Int(n) => Ok(*n),
                other => Err(format!("{what} holds a non-integer {}", short(other))),
            })
            .collect(),
        other => Err(format!("{what} is not a tuple: {}", short(other))),
    }
}

fn reduce(callable: Value, args: Value) -> std::result::Result<Value, String> {
    let Value::Tuple(args) = args else {
        return Err(format!("REDUCE arguments are not a tuple: {}", short(&args)));
    };
    match callable {
        Value::Global(Global::OrderedDict) => Ok(Value::Dict(Nested::empty())),
        Value::Global(Global::RebuildTensorV2) => match args.items.as_slice() {
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
            _ => Err(format!("_rebuild_tensor_v2 with unexpected arguments {}", short(&Value::Tuple(args)))),
        },
        Value::Global(Global::RebuildParameter) => match args.items.into_iter().next() {
            Some(t @ Value::Tensor(_)) => Ok(t),
            Some(other) => Err(format!("_rebuild_parameter of a non-tensor {}", short(&other))),
            None => Err("_rebuild_parameter without arguments".to_string()),
        },
        other => Err(format!("cannot call {}", short(&other))),
    }
}

/// The byte length of a storage of `numel` elements of `kind`, refusing what torch.load
/// refuses: a negative count, or one whose byte size does not fit.
fn storage_bytes(numel: i64, kind: Kind) -> std::result::Result<usize, String> {
    let bytes = u64::try_from(numel)
        .ok()
        .and_then(|n| n.checked_mul(kind.elt_size_in_bytes() as u64))
        .filter(|&b| b <= i64::MAX as u64)
        .and_then(|b| usize::try_from(b).ok());
    bytes.ok_or_else(|| format!("storage of {numel} {kind:?} elements is impossible"))
}

/// Checks a view of a storage of `storage_numel` elements as torch's `set_` does before any
/// tensor is built, with checked arithmetic: equal ranks, no negative size, offset or (on a
/// dimension longer than 1) stride, an element count and a reach that fit in `i64`, and a
/// reach inside the storage. A view with no elements touches no storage, so any offset and
/// stride are accepted for it, as torch accepts them. Returns the element count.
fn check_view(
    size: &[i64],
    stride: &[i64],
    offset: i64,
    storage_numel: i64,
) -> std::result::Result<i64, String> {
    if size.len() != stride.len() {
        return Err(format!("size {size:?} and stride {stride:?} have different lengths"));
    }
    if offset < 0 {
        return Err(format!("negative storage offset {offset}"));
    }
    if let Some(s) = size.iter().find(|&&s| s < 0) {
        return Err(format!("negative dimension {s} in size {size:?}"));
    }
    let numel = size
        .iter()
        .try_fold(1i64, |n, &s| n.checked_mul(s))
        .ok_or_else(|| format!("size {size:?} has more elements than fit in 64 bits"))?;
    if numel == 0 {
        return Ok(0);
    }
    let overflow = || format!("size {size:?} with stride {stride:?} at offset {offset} overflows");
    let mut last = offset;
    for (&s, &st) in size.iter().zip(stride) {
        if s == 1 {
            continue;
        }
        if st < 0 {
            return Err(format!("negative stride {st} in stride {stride:?}"));
        }
        last = (s - 1).checked_mul(st).and_then(|d| last.checked_add(d)).ok_or_else(overflow)?;
    }
    if last >= storage_numel {
        return Err(format!(
            "view of size {size:?}, stride {stride:?} at offset {offset} reaches element {last} of a \
             storage of {storage_numel}"
        ));
    }
    Ok(numel)
}

/// Reads the zip entry `name`, at most `limit` bytes plus one (so a longer entry is seen to be
/// longer without reading it all).
fn read_entry<R: Read + std::io::Seek>(
    archive: &mut zip::ZipArchive<R>,
    name: &str,
    limit: u64,
) -> std::result::Result<Vec<u8>, String> {
    let entry = archive.by_name(name).map_err(|e| format!("entry {name}: {e}"))?;
    // The declared size is the file's word only: reserve no more than the limit.
    let reserve = entry.size().min(limit).min(1 << 26) as usize;
    let mut buf = Vec::with_capacity(reserve);
    entry
        .take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| format!("entry {name} is truncated or corrupt: {e}"))?;
    Ok(buf)
}

/// The longest `data.pkl` read: state_dicts of the largest models pickle to a few MB.
const MAX_PICKLE_BYTES: u64 = 1 << 30;

/// Reads a `.pth` state_dict into `(key, tensor)` pairs in the file's order. Tensors are
/// contiguous CPU tensors with the saved dtype.
///
/// Everything the file declares is checked before it is used, as `torch.load` checks it:
/// storage sizes against the archive's records, and each tensor's size, stride and offset
/// against its storage (no negative values, no overflow, nothing out of bounds). A file that
/// `torch.load` refuses is an error here too, naming the file and the tensor.
///
/// The file must hold a state_dict alone (`torch.save(model.state_dict(), path)`); a
/// checkpoint that holds one among other objects is read by [`read_pth_checkpoint`].
///
/// # Errors
/// [`NnError::Io`] if the file cannot be opened, [`NnError::Pth`] for anything malformed.
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
/// The same safe pickle machine as [`read_pth`] reads the file, with the same checks, except
/// that objects of other globals (Lightning's hyperparameter `AttributeDict`, `pathlib` paths,
/// `argparse.Namespace`) are kept as opaque names: nothing is imported or called, and only the
/// chosen entry's storages are read. Keys are as saved (`model.` / `module.` prefixes included;
/// see `LoadOptions::strip_wrappers`).
///
/// # Errors
/// As [`read_pth`]; also when no entry holds a state_dict.
pub fn read_pth_checkpoint(path: impl AsRef<Path>) -> Result<(NamedTensors, Option<String>)> {
    read_pth_dict(path.as_ref(), true)
}

/// The state_dict of a checkpoint's root: an entry of [`STATE_DICT_ENTRIES`] holding a dict,
/// else the root itself.
fn state_dict_entry(root: Value) -> std::result::Result<(Entries, Option<String>), String> {
    let Value::Dict(items) = root else {
        return Err(format!("the top-level object is not a dict but {}", short(&root)));
    };
    let items = items.items;
    for name in STATE_DICT_ENTRIES {
        let found =
            items.iter().position(|(k, v)| matches!((k, v), (Value::Str(k), Value::Dict(_)) if k == name));
        if let Some(at) = found {
            let Some((_, Value::Dict(entry))) = items.into_iter().nth(at) else {
                unreachable!("matched above")
            };
            return Ok((entry.items, Some(name.to_string())));
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
fn read_pth_dict(path: &Path, container: bool) -> Result<(NamedTensors, Option<String>)> {
    let fail = |reason: String| NnError::Pth { path: path.to_path_buf(), reason };
    crate::file_kind::regular_file(path)?;
    let io = |error| NnError::Io { path: path.to_path_buf(), error };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut head = Vec::with_capacity(32);
    (&mut file).take(32).read_to_end(&mut head).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let mut archive = zip::ZipArchive::new(file).map_err(|e| {
        fail(if head.starts_with(b"PK\x03\x04") {
            // A zip's index (the central directory) is at its end: a cut-off file has none.
            format!(
                "the file is truncated or corrupt: it starts as a zip archive but its index at the end cannot be read ({e}; {size} bytes); an interrupted download or save? fetch or save it again"
            )
        } else if let Some(what) = crate::file_kind::describe_pickle(&head) {
            what
        } else {
            format!("not a zip archive ({e}), the format torch.save writes")
        })
    })?;
    let pkl_name = archive
        .file_names()
        .find(|n| n.ends_with("data.pkl") && n.matches('/').count() == 1)
        .map(str::to_string)
        .ok_or_else(|| fail("no <archive>/data.pkl entry".to_string()))?;
    let prefix = pkl_name.trim_end_matches("data.pkl").to_string();
    if archive.file_names().any(|n| n.starts_with(&format!("{prefix}code/"))) {
        return Err(fail(
            "this is a TorchScript module (torch.jit.save), not a state_dict; save the weights with \
             `torch.save(model.state_dict(), path)`"
                .to_string(),
        ));
    }
    if let Ok(order) = read_entry(&mut archive, &format!("{prefix}byteorder"), 16) {
        if order != b"little" {
            return Err(fail(format!("byte order `{}` is not supported", String::from_utf8_lossy(&order))));
        }
    }
    let pkl = read_entry(&mut archive, &pkl_name, MAX_PICKLE_BYTES).map_err(fail)?;
    if pkl.len() as u64 > MAX_PICKLE_BYTES {
        return Err(fail(format!("{pkl_name} is larger than {MAX_PICKLE_BYTES} bytes")));
    }
    let root = Machine::new(&pkl, container).run().map_err(fail)?;
    let (items, entry) = if container {
        state_dict_entry(root).map_err(fail)?
    } else {
        let Value::Dict(items) = root else {
            return Err(fail(format!("the top-level object is not a dict but {}", short(&root))));
        };
        (items.items, None)
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
        let bad = |reason: String| fail(format!("`{key}`: {reason}"));
        if !storages.contains_key(&t.key) {
            let expected = storage_bytes(t.storage_numel, t.kind).map_err(bad)?;
            let name = format!("{prefix}data/{}", t.key);
            let bytes = read_entry(&mut archive, &name, expected as u64).map_err(bad)?;
            if bytes.len() != expected {
                let found = if bytes.len() > expected { "more".to_string() } else { bytes.len().to_string() };
                return Err(bad(format!("storage {} has {found} bytes, expected {expected}", t.key)));
            }
            let storage = Tensor::f_from_data_size(&bytes, &[t.storage_numel], t.kind)
                .map_err(|e| bad(format!("storage {}: {e}", t.key)))?;
            storages.insert(t.key.clone(), storage);
        }
        // Like torch.load, a storage is read once; later references reuse it as it is.
        let storage = &storages[&t.key];
        if storage.kind() != t.kind {
            return Err(bad(format!(
                "storage {} is used as {:?} and as {:?}",
                t.key,
                storage.kind(),
                t.kind
            )));
        }
        let numel = check_view(&t.size, &t.stride, t.offset, storage.numel() as i64).map_err(bad)?;
        let tensor = if numel == 0 {
            Tensor::f_zeros(t.size.as_slice(), (t.kind, tch::Device::Cpu))
        } else {
            // A dimension of length 1 is never stepped along, so its stride (possibly negative,
            // which as_strided refuses) does not matter.
            let stride: Vec<i64> =
                t.size.iter().zip(&t.stride).map(|(&s, &st)| if s == 1 { 0 } else { st }).collect();
            storage
                .f_as_strided(t.size.as_slice(), stride.as_slice(), t.offset)
                .and_then(|v| v.f_contiguous())
        };
        out.push((key.clone(), tensor.map_err(|e| bad(e.to_string()))?));
    }
    Ok((out, entry))
}

/// `v`'s Debug text, cut at 80 characters without formatting the rest.
fn short(v: &Value) -> String {
    if let Value::Opaque(name) = v {
        return format!("an object of `{name}` (not rebuilt: only tensors load)");
    }
    struct Limited(String);
    impl fmt::Write for Limited {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            for c in s.chars() {
                if self.0.len() >= 80 {
                    return Err(fmt::Error);
                }
                self.0.push(c);
            }
            Ok(())
        }
    }
    let mut out = Limited(String::new());
    match fmt::write(&mut out, format_args!("{v:?}")) {
        Ok(()) => out.0,
        Err(_) => format!("{}...", out.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_are_checked_with_torch_set_rules() {
        assert_eq!(check_view(&[2, 3], &[3, 1], 0, 6), Ok(6));
        assert_eq!(check_view(&[3, 2], &[1, 3], 0, 6), Ok(6), "a transposed view");
        assert_eq!(check_view(&[], &[], 3, 4), Ok(1), "a scalar at the last element");
        assert!(check_view(&[], &[], 4, 4).is_err(), "a scalar past the end");
        assert_eq!(check_view(&[0, 3], &[i64::MAX, 1], i64::MAX, 0), Ok(0), "an empty view needs no storage");
        assert_eq!(check_view(&[1], &[-5], 0, 1), Ok(1), "a length-1 dimension's stride is never used");
        assert!(check_view(&[2], &[-1], 1, 4).unwrap_err().contains("negative stride"));
        assert!(check_view(&[2], &[1], -1, 4).unwrap_err().contains("negative storage offset"));
        assert!(check_view(&[-1], &[1], 0, 4).unwrap_err().contains("negative dimension"));
        assert!(check_view(&[1 << 40, 1 << 40], &[1, 1], 0, 4).unwrap_err().contains("64 bits"));
        assert!(check_view(&[3], &[1 << 62], 1 << 62, 4).unwrap_err().contains("overflows"));
        assert!(check_view(&[2, 2], &[1], 0, 4).unwrap_err().contains("different lengths"));
        assert!(check_view(&[2, 2], &[2, 1], 1, 4).unwrap_err().contains("reaches element 4"));
    }

    #[test]
    fn storage_sizes_that_do_not_fit_are_refused() {
        assert_eq!(storage_bytes(4, Kind::Float), Ok(16));
        assert!(storage_bytes(-1, Kind::Float).is_err());
        assert!(storage_bytes(1 << 61, Kind::Double).is_err());
        assert!(storage_bytes(i64::MAX, Kind::Uint8).is_ok(), "fits; the record's length then decides");
    }

    #[test]
    fn error_text_of_a_huge_value_is_cut_without_formatting_it_all() {
        let mut list = Nested::empty();
        for i in 0..100_000 {
            push_item(&mut list, Value::Int(i)).unwrap();
        }
        let text = short(&Value::List(list));
        assert!(text.len() <= 83 && text.ends_with("..."), "{text}");
    }
}
