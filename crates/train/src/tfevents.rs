//! TensorBoard event files (`events.out.tfevents.*`) with scalar summaries, written in Rust.
//!
//! The format is TensorFlow's: a file of TFRecords, each `length: u64 LE`, `masked_crc32c(length)`,
//! `payload`, `masked_crc32c(payload)`, whose payloads are `tensorflow.Event` protobuf messages.
//! The first event carries `file_version = "brain.Event:2"`; scalars are `Summary.Value`s with
//! `simple_value`, which TensorBoard's scalars dashboard reads as PyTorch's
//! `SummaryWriter.add_scalar` writes them.

use crate::error::{Result, TrainError};
use prost::Message;
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// `tensorflow.Event` (tensorflow/core/util/event.proto), the fields this writer uses.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// Seconds since the Unix epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// Global step of the event (the epoch, for per-epoch scalars).
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// What the event holds.
    #[prost(oneof = "EventWhat", tags = "3, 5, 7")]
    pub what: Option<EventWhat>,
}

/// `Event.what`, the one-of.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum EventWhat {
    /// `file_version`: `"brain.Event:2"` in the first event of a file.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// `summary`: scalar values.
    #[prost(message, tag = "5")]
    Summary(Summary),
    /// `session_log`: a `START` tells TensorBoard the run restarted at this step.
    #[prost(message, tag = "7")]
    SessionLog(SessionLog),
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    /// The values.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    /// The tag TensorBoard groups by (`loss/train`).
    #[prost(string, tag = "1")]
    pub tag: String,
    /// The value.
    #[prost(oneof = "SummaryValueKind", tags = "2")]
    pub value: Option<SummaryValueKind>,
}

/// `Summary.Value.value`, the one-of (only scalars here).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum SummaryValueKind {
    /// `simple_value`: a float32 scalar.
    #[prost(float, tag = "2")]
    SimpleValue(f32),
}

/// `tensorflow.SessionLog`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SessionLog {
    /// `SessionStatus`: 1 = `START`.
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// `SessionLog.SessionStatus.START`.
const SESSION_START: i32 = 1;

/// CRC-32C (Castagnoli, reflected polynomial `0x82F63B78`), the checksum of TFRecords.
pub fn crc32c(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut crc = i as u32;
            let mut bit = 0;
            while bit < 8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
                bit += 1;
            }
            table[i] = crc;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// TFRecord's masked CRC: rotate right by 15 and add `0xa282ead8`, so a CRC of data that
/// itself holds CRCs stays well distributed.
pub fn masked_crc32c(bytes: &[u8]) -> u32 {
    crc32c(bytes).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord around `payload`.
pub fn tfrecord(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(payload.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&masked_crc32c(payload).to_le_bytes());
    out
}

/// Writes scalars to a new TensorBoard event file in a run folder, like PyTorch's
/// `SummaryWriter(log_dir).add_scalar(tag, value, step)`. `tensorboard --logdir runs` shows it.
///
/// Each call writes whole records straight to the file (no buffer), so TensorBoard sees an
/// epoch's scalars as soon as they are added and a crash never leaves half a record behind
/// the last complete one.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    file: File,
}

impl EventWriter {
    /// Creates `dir/events.out.tfevents.<unix seconds>.<hostname>` (TensorFlow's name; a `.N`
    /// suffix is added should that file exist already) and writes the `brain.Event:2` header.
    pub fn create(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let now = wall_time();
        let host = gethostname::gethostname().to_string_lossy().replace(['/', '\\'], "_");
        let base = format!("events.out.tfevents.{:010}.{host}", now as u64);
        let mut n = 0;
        let (path, file) = loop {
            let name = if n == 0 { base.clone() } else { format!("{base}.{n}") };
            let path = dir.join(name);
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(TrainError::io(path, e)),
            }
        };
        let mut writer = EventWriter { path, file };
        writer.write_event(&Event {
            wall_time: now,
            step: 0,
            what: Some(EventWhat::FileVersion("brain.Event:2".to_string())),
        })?;
        Ok(writer)
    }

    /// A new event file for a run resumed from the checkpoint of `last_step` (the last epoch
    /// it completed, as for [`CsvLogger::resume`](crate::CsvLogger::resume)): also writes a
    /// `SessionLog START` at `last_step + 1`, which makes TensorBoard discard the steps after
    /// `last_step` from the files before (logged after that checkpoint, before a crash), as it
    /// does for TensorFlow's restarted runs.
    pub fn resume(dir: impl AsRef<Path>, last_step: i64) -> Result<Self> {
        let mut writer = Self::create(dir)?;
        writer.write_event(&Event {
            wall_time: wall_time(),
            step: last_step + 1,
            what: Some(EventWhat::SessionLog(SessionLog { status: SESSION_START })),
        })?;
        Ok(writer)
    }

    /// [`resume`](Self::resume) for a run that also logs on the optimizer-step axis (the
    /// scalars of `step_tags`, at global steps, beside per-epoch ones): the `SessionLog START`
    /// at `last_step + 1` makes TensorBoard drop every point from that step on, whatever its
    /// tag, so the points of `step_tags` that the folder's earlier files hold at steps up to
    /// `last_global_step` (the checkpoint's optimizer step), as TensorBoard reads them, are
    /// written again after it. Only the points logged after the checkpoint stay dropped.
    pub fn resume_with_step_tags(
        dir: impl AsRef<Path>,
        last_step: i64,
        step_tags: &BTreeSet<String>,
        last_global_step: i64,
    ) -> Result<Self> {
        let dir = dir.as_ref();
        let kept = if step_tags.is_empty() { Vec::new() } else { surviving_points(dir, step_tags)? };
        let mut writer = Self::resume(dir, last_step)?;
        for event in kept.iter().filter(|e| e.step > last_step && e.step <= last_global_step) {
            writer.write_event(event)?;
        }
        Ok(writer)
    }

    /// Adds one scalar (stored as f32, like `add_scalar`).
    pub fn add_scalar(&mut self, tag: &str, value: f64, step: i64) -> Result<()> {
        self.add_scalars(step, &[(tag, value)])
    }

    /// Adds several scalars of one step in one event.
    pub fn add_scalars(&mut self, step: i64, values: &[(&str, f64)]) -> Result<()> {
        let value = values
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: tag.to_string(),
                value: Some(SummaryValueKind::SimpleValue(*v as f32)),
            })
            .collect();
        self.write_event(&Event {
            wall_time: wall_time(),
            step,
            what: Some(EventWhat::Summary(Summary { value })),
        })
    }

    /// Writes any event as one record.
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        let record = tfrecord(&event.encode_to_vec());
        self.file
            .write_all(&record)
            .and_then(|()| self.file.flush())
            .map_err(|e| TrainError::io(&self.path, e))
    }

    /// The event file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The events of one event file, in order; reading stops at a record cut short or failing
/// its checksums (as TensorBoard's reader does, at a crash's last partial write).
pub fn read_events(path: impl AsRef<Path>) -> Result<Vec<Event>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| TrainError::io(path, e))?;
    let mut events = Vec::new();
    let mut rest = bytes.as_slice();
    while rest.len() >= 12 {
        let (len_bytes, tail) = rest.split_at(8);
        let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
        if u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) != masked_crc32c(len_bytes) {
            break;
        }
        let tail = &tail[4..];
        let Some(len) =
            usize::try_from(len).ok().filter(|&n| n.checked_add(4).is_some_and(|m| m <= tail.len()))
        else {
            break;
        };
        let (payload, tail) = tail.split_at(len);
        if u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) != masked_crc32c(payload) {
            break;
        }
        match Event::decode(payload) {
            Ok(event) => events.push(event),
            Err(_) => break,
        }
        rest = &tail[4..];
    }
    Ok(events)
}

/// The scalar events of `tags` that TensorBoard keeps from the event files in `dir`: read in
/// its order (by file name), each `SessionLog START` at step `s` dropping the points before it
/// at steps `>= s`; the values of other tags left out.
fn surviving_points(dir: &Path, tags: &BTreeSet<String>) -> Result<Vec<Event>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| TrainError::io(dir, e))? {
        let entry = entry.map_err(|e| TrainError::io(dir, e))?;
        if entry.file_name().to_string_lossy().contains("tfevents") && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    let mut kept: Vec<Event> = Vec::new();
    for file in files {
        for event in read_events(&file)? {
            match event.what {
                Some(EventWhat::SessionLog(SessionLog { status: SESSION_START })) => {
                    kept.retain(|e| e.step < event.step);
                }
                Some(EventWhat::Summary(summary)) => {
                    let value: Vec<SummaryValue> =
                        summary.value.into_iter().filter(|v| tags.contains(&v.tag)).collect();
                    if !value.is_empty() {
                        kept.push(Event { what: Some(EventWhat::Summary(Summary { value })), ..event });
                    }
                }
                _ => {}
            }
        }
    }
    Ok(kept)
}

fn wall_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_vectors() {
        // The check value of CRC-32C and the test vectors of RFC 3720 (iSCSI), appendix B.4.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        let descending: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&descending), 0x113F_DB5C);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn masked_crc_matches_tensorboard() {
        // Values of tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c, the
        // check its record reader applies.
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
        assert_eq!(masked_crc32c(&3u64.to_le_bytes()), 0x0e49_99b0);
        assert_eq!(masked_crc32c(b"abc"), 0x21f1_576e);
    }

    #[test]
    fn record_framing() {
        let rec = tfrecord(b"abc");
        assert_eq!(rec.len(), 8 + 4 + 3 + 4);
        assert_eq!(&rec[..8], &3u64.to_le_bytes());
        assert_eq!(&rec[12..15], b"abc");
        assert_eq!(&rec[15..], &masked_crc32c(b"abc").to_le_bytes());
    }

    #[test]
    fn reading_stops_at_a_record_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.add_scalar("lr", 0.5, 1).unwrap();
        w.add_scalar("lr", 0.25, 2).unwrap();
        let path = w.path().to_path_buf();
        drop(w);
        assert_eq!(read_events(&path).unwrap().len(), 3);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let events = read_events(&path).unwrap();
        assert_eq!(events.len(), 2, "the header and the first scalar");
        assert_eq!(events[1].step, 1);
    }

    #[test]
    fn events_decode_back() {
        let e = Event {
            wall_time: 1.5,
            step: 7,
            what: Some(EventWhat::Summary(Summary {
                value: vec![SummaryValue {
                    tag: "loss/train".into(),
                    value: Some(SummaryValueKind::SimpleValue(0.25)),
                }],
            })),
        };
        assert_eq!(Event::decode(e.encode_to_vec().as_slice()).unwrap(), e);
    }
}
