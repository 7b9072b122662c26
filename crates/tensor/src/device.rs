//! Device choice from strings (`cpu`, `cuda`, `cuda:N`, `auto`), checked against the machine.

use crate::cuda::cuda_status;
use crate::error::{Result, TensorError};
use std::fmt;
use std::str::FromStr;
use tch::Device;

/// A device as a user writes it in a config file or on the command line.
///
/// `auto` picks CUDA device 0 whenever PyTorch's `torch.cuda.is_available()` would be true,
/// else the CPU. Parsing is case-insensitive and ignores surrounding spaces.
///
/// ```
/// use torchlight_tensor::DeviceSpec;
/// let spec: DeviceSpec = "cuda:1".parse().unwrap();
/// assert_eq!(spec, DeviceSpec::Cuda(1));
/// assert_eq!(spec.to_string(), "cuda:1");
/// assert!("gpu".parse::<DeviceSpec>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeviceSpec {
    /// The CPU.
    Cpu,
    /// CUDA device N (`cuda` alone means `cuda:0`).
    Cuda(usize),
    /// CUDA device 0 when CUDA is available, else the CPU.
    #[default]
    Auto,
}

impl DeviceSpec {
    /// The tch device this spec names on this machine; an error when it names a GPU that
    /// is not there, with the reason CUDA is unavailable.
    pub fn resolve(self) -> Result<Device> {
        let status = cuda_status();
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Auto => Ok(if status.available { Device::Cuda(0) } else { Device::Cpu }),
            DeviceSpec::Cuda(index) => {
                if !status.available {
                    return Err(TensorError::CudaUnavailable {
                        requested: self.to_string(),
                        reason: status.reason.clone().unwrap_or_default(),
                    });
                }
                if index >= status.device_count {
                    return Err(TensorError::DeviceOutOfRange { index, count: status.device_count });
                }
                Ok(Device::Cuda(index))
            }
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = TensorError;

    fn from_str(s: &str) -> Result<Self> {
        let invalid = |reason: String| TensorError::InvalidDevice { spec: s.to_string(), reason };
        let text = s.trim().to_ascii_lowercase();
        match text.as_str() {
            "cpu" => return Ok(DeviceSpec::Cpu),
            "cuda" => return Ok(DeviceSpec::Cuda(0)),
            "auto" => return Ok(DeviceSpec::Auto),
            "" => return Err(invalid("the string is empty".to_string())),
            _ => {}
        }
        if let Some(n) = text.strip_prefix("cuda:") {
            return n
                .parse::<usize>()
                .map(DeviceSpec::Cuda)
                .map_err(|_| invalid(format!("`{n}` is not a device number")));
        }
        match text.split(':').next().unwrap_or_default() {
            "" => Err(invalid("no device type before `:`".to_string())),
            kind => Err(invalid(format!("unknown device type `{kind}`"))),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceSpec::Auto => f.write_str("auto"),
        }
    }
}

/// Parses and resolves a device string in one step: `device("auto")?`.
pub fn device(spec: &str) -> Result<Device> {
    spec.parse::<DeviceSpec>()?.resolve()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_four_forms() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!(" CUDA ".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        assert_eq!("Auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
    }

    #[test]
    fn rejects_bad_strings_with_the_reason() {
        for (input, needle) in [
            ("gpu", "unknown device type `gpu`"),
            ("cuda:x", "`x` is not a device number"),
            ("cuda:-1", "`-1` is not a device number"),
            ("mps:0", "unknown device type `mps`"),
            ("", "empty"),
            (":0", "no device type"),
        ] {
            let err = input.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
            assert!(err.contains("expected `cpu`, `cuda`, `cuda:N` or `auto`"), "{err}");
        }
    }
}
