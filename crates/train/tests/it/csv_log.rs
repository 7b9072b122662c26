//! metrics.csv: columns from the run's metrics, one flushed row per epoch, resume without
//! duplicates, foreign files and changed columns named.

use torchlight_train::{read_metrics_csv, CsvLogger, EpochRecord, TrainError};

const HEADER: &str =
    "epoch,lr,train_loss,train_acc,val_loss,val_acc,val_top5,seconds,samples_per_s,data_stall_pct";

fn record(epoch: usize) -> EpochRecord {
    let e = epoch as f64;
    EpochRecord {
        epoch,
        lr: 1e-3 / e,
        train: vec![("loss".into(), 2.0 / e), ("acc".into(), 0.1 * e)],
        val: vec![("loss".into(), 2.5 / e), ("acc".into(), 0.09 * e), ("top5".into(), 0.5)],
        ema_val: vec![],
        seconds: 10.0 + e,
        samples_per_s: 512.25,
        data_stall_pct: 3.5,
    }
}

#[test]
fn columns_follow_the_metrics() {
    let tmp = crate::temp_dir();
    let path = tmp.path().join("metrics.csv");
    let mut log = CsvLogger::create(&path).unwrap();
    log.append(&record(1)).unwrap();
    // Flushed: visible to a reader while the logger is still open.
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, format!("{HEADER}\n1,0.001,2,0.1,2.5,0.09,0.5,11,512.25,3.5\n"));
    assert_eq!(log.path(), path);
    let regression =
        EpochRecord { train: vec![("loss".into(), 1.0), ("mae".into(), 0.5)], val: vec![], ..record(1) };
    assert_eq!(regression.csv_header(), "epoch,lr,train_loss,train_mae,seconds,samples_per_s,data_stall_pct");
    let err = log.append(&regression).unwrap_err();
    assert!(err.to_string().contains("this run logs `epoch,lr,train_loss,train_mae"), "{err}");
}

#[test]
fn rows_read_back_equal() {
    let tmp = crate::temp_dir();
    let path = tmp.path().join("metrics.csv");
    let mut log = CsvLogger::create(&path).unwrap();
    let rows: Vec<EpochRecord> = (1..=5).map(record).collect();
    for r in &rows {
        log.append(r).unwrap();
    }
    assert_eq!(read_metrics_csv(&path).unwrap(), rows);
}

#[test]
fn resume_keeps_earlier_rows_and_drops_later_ones() {
    let tmp = crate::temp_dir();
    let path = tmp.path().join("metrics.csv");
    let mut log = CsvLogger::create(&path).unwrap();
    for e in 1..=5 {
        log.append(&record(e)).unwrap();
    }
    drop(log);
    // Crash after logging epoch 5; the last checkpoint is epoch 4: resume logs epoch 5 again.
    let mut log = CsvLogger::resume(&path, 4).unwrap();
    let mut redo = record(5);
    redo.val[1].1 = 0.77;
    log.append(&redo).unwrap();
    log.append(&record(6)).unwrap();
    let rows = read_metrics_csv(&path).unwrap();
    let epochs: Vec<usize> = rows.iter().map(|r| r.epoch).collect();
    assert_eq!(epochs, vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(rows[4], redo);
    assert_eq!(rows[..4], (1..=4).map(record).collect::<Vec<_>>()[..]);
    assert!(!tmp.path().join("metrics.csv.tmp").exists());

    // Resuming past every row keeps all of them; a missing file starts empty.
    let log = CsvLogger::resume(&path, 100).unwrap();
    drop(log);
    assert_eq!(read_metrics_csv(&path).unwrap().len(), 6);
    let fresh = tmp.path().join("new.csv");
    let mut log = CsvLogger::resume(&fresh, 3).unwrap();
    log.append(&record(4)).unwrap();
    assert!(std::fs::read_to_string(&fresh).unwrap().starts_with(&format!("{HEADER}\n4,")));
}

#[test]
fn foreign_files_are_errors_naming_the_line() {
    let tmp = crate::temp_dir();
    let path = tmp.path().join("metrics.csv");
    std::fs::write(&path, "epoch,loss\n1,0.5\n").unwrap();
    let err = CsvLogger::resume(&path, 1).unwrap_err();
    assert!(matches!(err, TrainError::Csv { line: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("metrics.csv:1"), "{err}");
    // The file is left as it was.
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "epoch,loss\n1,0.5\n");

    std::fs::write(
        &path,
        format!("{HEADER}\n1,0.1,0.5,0.5,0.5,0.5,1,1,1,0\n2,0.1,oops,0.5,0.5,0.5,1,1,1,0\n"),
    )
    .unwrap();
    let err = read_metrics_csv(&path).unwrap_err();
    assert!(matches!(err, TrainError::Csv { line: 3, .. }), "{err:?}");
    assert!(err.to_string().contains("train_loss"), "{err}");
}
