//! TorchScript tracing over named tensors: the libtorch half of model export.
//!
//! The caller (the export crate) passes its model's tensors with their `state_dict` keys and a
//! forward closure; the shim (`csrc/trace.cpp`) registers the tensors on a TorchScript module
//! (dotted keys become submodules), traces the closure against it and saves the module, which
//! Python's `torch.jit.load` and tch's `CModule::load` both read.

use crate::error::{Result, TensorError};
use crate::ffi;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use tch::Tensor;

type ForwardFn =
    unsafe extern "C" fn(ctx: *mut c_void, inputs: *mut *mut c_void, n_inputs: usize) -> *mut c_void;

extern "C" {
    fn tl_jit_trace_save(
        names: *const *const c_char,
        tensors: *const *mut c_void,
        is_buffer: *const bool,
        n: usize,
        examples: *const *mut c_void,
        input_names: *const *const c_char,
        n_inputs: usize,
        forward: ForwardFn,
        ctx: *mut c_void,
        path: *const c_char,
    ) -> c_int;
}

/// A tensor to register on the traced module.
pub struct TracedTensor<'a> {
    /// Its `state_dict` key, e.g. `layer1.0.conv1.weight`.
    pub name: &'a str,
    /// The tensor the forward closure uses (the same storage, not a copy).
    pub tensor: &'a Tensor,
    /// A buffer (`running_mean`) rather than a parameter.
    pub is_buffer: bool,
}

struct Context<'f> {
    forward: &'f mut dyn FnMut(&[Tensor]) -> Tensor,
    panic: Option<String>,
}

unsafe extern "C" fn call_forward(
    ctx: *mut c_void,
    inputs: *mut *mut c_void,
    n_inputs: usize,
) -> *mut c_void {
    // SAFETY: ctx is the &mut Context passed to tl_jit_trace_save, alive for this call.
    let ctx = unsafe { &mut *(ctx as *mut Context) };
    // SAFETY: inputs holds n_inputs live at::Tensor pointers; a shallow clone shares the
    // TensorImpl (which the tracer keys on) and is owned by the new handle.
    let inputs: Vec<Tensor> = (0..n_inputs)
        .map(|i| unsafe {
            Tensor::from_ptr(torch_sys::at_shallow_clone(*inputs.add(i) as *mut torch_sys::C_tensor))
        })
        .collect();
    let input = inputs.as_slice();
    match catch_unwind(AssertUnwindSafe(|| (ctx.forward)(input))) {
        Ok(mut output) => {
            let raw = output.as_mut_ptr() as *mut c_void;
            // Ownership of the at::Tensor passes to the shim, which deletes it.
            std::mem::forget(output);
            raw
        }
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".to_string());
            ctx.panic = Some(message);
            std::ptr::null_mut()
        }
    }
}

/// Traces `forward(example)` with `tensors` registered as the module's parameters and buffers,
/// and saves the TorchScript module to `path`; the module's `forward` takes one tensor.
/// Tensors must not require grad while tracing (the caller freezes them); the caller's grad mode
/// is left as it was.
pub fn trace_and_save(
    tensors: &[TracedTensor<'_>],
    example: &Tensor,
    forward: &mut dyn FnMut(&Tensor) -> Tensor,
    path: &Path,
) -> Result<()> {
    trace_and_save_inputs(tensors, &[("input", example)], &mut |inputs: &[Tensor]| forward(&inputs[0]), path)
}

/// [`trace_and_save`] for a forward of several tensors: the module's `forward` takes
/// `examples`' tensors as its arguments, in order and under their names (`forward(ids,
/// lengths)`), and `forward` gets them in that order.
pub fn trace_and_save_inputs(
    tensors: &[TracedTensor<'_>],
    examples: &[(&str, &Tensor)],
    forward: &mut dyn FnMut(&[Tensor]) -> Tensor,
    path: &Path,
) -> Result<()> {
    let cstring = |what: &str| {
        CString::new(what).map_err(|_| TensorError::torch("trace", format!("NUL in name {what:?}")))
    };
    let names: Vec<CString> = tensors.iter().map(|t| cstring(t.name)).collect::<Result<_>>()?;
    let name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let tensor_ptrs: Vec<*mut c_void> = tensors.iter().map(|t| t.tensor.as_ptr() as *mut c_void).collect();
    let buffers: Vec<bool> = tensors.iter().map(|t| t.is_buffer).collect();
    let input_names: Vec<CString> = examples.iter().map(|(n, _)| cstring(n)).collect::<Result<_>>()?;
    let input_name_ptrs: Vec<*const c_char> = input_names.iter().map(|n| n.as_ptr()).collect();
    let example_ptrs: Vec<*mut c_void> = examples.iter().map(|(_, t)| t.as_ptr() as *mut c_void).collect();
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| TensorError::torch("trace", format!("NUL in path {}", path.display())))?;
    let mut ctx = Context { forward, panic: None };
    // SAFETY: every pointer is valid for the call; the shim only reads names/flags, shares the
    // tensors (no ownership transfer) and calls back into `call_forward` with `ctx`.
    let rc = unsafe {
        tl_jit_trace_save(
            name_ptrs.as_ptr(),
            tensor_ptrs.as_ptr(),
            buffers.as_ptr(),
            tensors.len(),
            example_ptrs.as_ptr(),
            input_name_ptrs.as_ptr(),
            examples.len(),
            call_forward,
            &mut ctx as *mut Context as *mut c_void,
            c_path.as_ptr(),
        )
    };
    ffi::check("trace", rc).map_err(|err| match (err, ctx.panic) {
        (TensorError::Torch { op, message }, Some(p)) => {
            TensorError::Torch { op, message: format!("{message}: {p}") }
        }
        (err, _) => err,
    })
}
