//! Tensor diagnostics: a one-line summary for debugging, and a finiteness check that names
//! the tensor.

use crate::error::{Result, TensorError};
use crate::grad::no_grad;
use std::fmt;
use tch::{Device, Kind, Tensor};

/// What a seasoned PyTorch user prints first when a tensor looks wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSummary {
    /// `tensor.shape`.
    pub shape: Vec<i64>,
    /// `tensor.dtype`.
    pub kind: Kind,
    /// `tensor.device`.
    pub device: Device,
    /// `tensor.requires_grad`.
    pub requires_grad: bool,
    /// `tensor.numel()`.
    pub numel: i64,
    /// Smallest finite value (None when there is none).
    pub min: Option<f64>,
    /// Largest finite value.
    pub max: Option<f64>,
    /// Mean of the finite values.
    pub mean: Option<f64>,
    /// Standard deviation (unbiased) of the finite values; None with fewer than two.
    pub std: Option<f64>,
    /// Number of NaN elements.
    pub nan: i64,
    /// Number of +Inf and -Inf elements.
    pub inf: i64,
}

fn is_float(kind: Kind) -> bool {
    matches!(kind, Kind::Half | Kind::BFloat16 | Kind::Float | Kind::Double)
}

/// Summarises `tensor`: shape, dtype, device, and min/max/mean/std over its finite values with
/// the NaN and Inf counts. Reads one small tensor back to the host (a device sync).
///
/// ```
/// use tch::Tensor;
/// let t = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0]);
/// let s = torchlight_tensor::summary(&t);
/// assert_eq!((s.nan, s.min, s.max), (1, Some(1.0), Some(3.0)));
/// println!("{s}"); // [3] Float cpu  min 1 max 3 mean 2 std 1.41421  NaN 1 Inf 0
/// ```
///
/// # Panics
/// For complex and quantized tensors, which have no order.
pub fn summary(tensor: &Tensor) -> TensorSummary {
    let _guard = no_grad();
    let kind = tensor.kind();
    let x = tensor.detach().to_kind(Kind::Double).flatten(0, -1);
    let finite_mask = x.isfinite();
    let finite = x.masked_select(&finite_mask);
    let n_finite = finite.numel() as i64;
    let nan = x.isnan().sum(Kind::Double);
    let inf = x.isinf().sum(Kind::Double);
    let zero = || Tensor::zeros([], (Kind::Double, x.device()));
    let (min, max, mean, std) = if n_finite > 0 {
        let std = if n_finite > 1 { finite.std(true) } else { zero() };
        (finite.min(), finite.max(), finite.mean(Kind::Double), std)
    } else {
        (zero(), zero(), zero(), zero())
    };
    let stats = Tensor::stack(&[min, max, mean, std, nan, inf], 0).to_device(Device::Cpu);
    let v = Vec::<f64>::try_from(&stats).expect("a 6-element CPU double tensor converts to Vec<f64>");
    let present = |x: f64| (n_finite > 0).then_some(x);
    TensorSummary {
        shape: tensor.size(),
        kind,
        device: tensor.device(),
        requires_grad: tensor.requires_grad(),
        numel: tensor.numel() as i64,
        min: present(v[0]),
        max: present(v[1]),
        mean: present(v[2]),
        std: (n_finite > 1).then_some(v[3]),
        nan: v[4] as i64,
        inf: v[5] as i64,
    }
}

impl fmt::Display for TensorSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let device = match self.device {
            Device::Cpu => "cpu".to_string(),
            Device::Cuda(n) => format!("cuda:{n}"),
            other => format!("{other:?}").to_lowercase(),
        };
        write!(f, "{:?} {:?} {device}", self.shape, self.kind)?;
        if self.requires_grad {
            f.write_str(" requires_grad")?;
        }
        let num = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
        write!(
            f,
            "  min {} max {} mean {} std {}  NaN {} Inf {}",
            num(self.min),
            num(self.max),
            num(self.mean),
            num(self.std),
            self.nan,
            self.inf
        )
    }
}

/// Ok when every element of `tensor` is finite; otherwise an error naming the tensor with
/// its shape and NaN/Inf counts. Integer and bool tensors are always finite. One device sync.
///
/// ```
/// let t = tch::Tensor::from_slice(&[1.0f32, f32::INFINITY]);
/// let err = torchlight_tensor::ensure_finite("logits", &t).unwrap_err();
/// assert!(err.to_string().contains("`logits`"));
/// ```
pub fn ensure_finite(name: &str, tensor: &Tensor) -> Result<()> {
    if !is_float(tensor.kind()) {
        return Ok(());
    }
    let _guard = no_grad();
    if tensor.isfinite().all().int64_value(&[]) == 1 {
        return Ok(());
    }
    let s = summary(tensor);
    Err(TensorError::NonFinite {
        name: name.to_string(),
        shape: s.shape,
        nan: s.nan,
        inf: s.inf,
        numel: s.numel,
    })
}
