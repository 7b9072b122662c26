//! CSV/TSV and JSON lines: quoting, columns by name, labels to sorted classes, bad rows named.

use crate::write;
use torchlight_data::Dataset;
use torchlight_text::{read_delimited, read_json_lines, Columns, DelimitedOptions, TextError};

#[test]
fn csv_quoting_keeps_commas_newlines_and_quotes_inside_fields() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "train.csv",
        "\u{feff}label,text\npos,\"Great, really great\"\nneg,\"Line one\nline two, with \"\"quotes\"\"\"\npos,plain\n",
    );
    let records = read_delimited(dir.path().join("train.csv"), &DelimitedOptions::csv()).unwrap();
    assert_eq!(records.texts(), ["Great, really great", "Line one\nline two, with \"quotes\"", "plain"]);
    assert_eq!(records.classes(), ["neg", "pos"]);
    assert_eq!(records.targets(), [1, 0, 1]);
    // A record is numbered by the line it starts on; the quoted newline moves the next one down.
    assert_eq!((records.line(0), records.line(1), records.line(2)), (2, 3, 5));
    let mut rng = torchlight_data::rng_from_seed(0);
    assert_eq!(records.get(0, &mut rng).unwrap(), ("Great, really great".to_string(), 1));
}

#[test]
fn bad_rows_columns_and_labels_are_named_by_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    write(dir.path(), "bad.csv", "text,label\nfine,pos\ntoo,many,fields\n");
    let err = read_delimited(&path, &DelimitedOptions::csv()).unwrap_err();
    assert_eq!(err.to_string(), format!("{} line 3: 3 fields where the header has 2", path.display()));

    let err = read_delimited(&path, &DelimitedOptions::csv().with_columns(Columns::new("review", "label")))
        .unwrap_err();
    assert!(matches!(&err, TextError::MissingColumn { column, .. } if column == "review"), "{err}");
    assert!(err.to_string().contains("bad.csv"), "{err}");

    write(dir.path(), "val.csv", "text,label\nok,pos\nhm,meh\n");
    let fixed = DelimitedOptions::csv().with_columns(Columns::default().with_classes(["pos", "neg"]));
    let err = read_delimited(dir.path().join("val.csv"), &fixed).unwrap_err();
    assert!(matches!(err, TextError::Row { line: 3, .. }), "{err}");
    assert!(err.to_string().contains("label \"meh\" is not one of the classes [\"neg\", \"pos\"]"), "{err}");

    write(dir.path(), "latin1.csv", b"text,label\ncaf\xe9,pos\n");
    let err = read_delimited(dir.path().join("latin1.csv"), &DelimitedOptions::csv()).unwrap_err();
    assert!(matches!(err, TextError::Row { line: 2, .. }) && err.to_string().contains("not UTF-8"), "{err}");
}

#[test]
fn tsv_with_other_column_names() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d.tsv", "sentence\tsentiment\na, b\t1\n\"tab\there\"\t0\n");
    let options = DelimitedOptions::tsv().with_columns(Columns::new("sentence", "sentiment"));
    let records = read_delimited(dir.path().join("d.tsv"), &options).unwrap();
    assert_eq!(records.texts(), ["a, b", "tab\there"]);
    assert_eq!(records.targets(), [1, 0]);
}

#[test]
fn json_lines_records_bad_lines_and_empty_documents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.jsonl");
    write(
        dir.path(),
        "d.jsonl",
        "{\"text\": \"héllo, \\\"world\\\"\\n\", \"label\": \"b\"}\n{\"text\": \"  \", \"label\": \"a\", \"id\": 3}\n\n",
    );
    let records = read_json_lines(&path, &Columns::default()).unwrap();
    assert_eq!(records.texts()[0], "héllo, \"world\"\n");
    assert_eq!(records.classes(), ["a", "b"]);
    let report = records.report();
    assert_eq!(report.empty.len(), 1);
    assert_eq!(report.empty[0].to_string(), format!("{} line 2", path.display()));
    let mut rng = torchlight_data::rng_from_seed(0);
    let err = records.get(1, &mut rng).unwrap_err().to_string();
    assert!(err.contains("line 2: empty document") && err.contains("d.jsonl"), "{err}");

    write(dir.path(), "d.jsonl", "{\"text\": \"ok\", \"label\": \"a\"}\n{\"text\": \"cut\n");
    let err = read_json_lines(&path, &Columns::default()).unwrap_err();
    assert!(matches!(err, TextError::Row { line: 2, .. }) && err.to_string().contains("not JSON"), "{err}");
    write(dir.path(), "d.jsonl", "{\"body\": \"ok\", \"label\": \"a\"}\n");
    let err = read_json_lines(&path, &Columns::default()).unwrap_err();
    assert_eq!(err.to_string(), format!("{} line 1: no `text` key", path.display()));
    write(dir.path(), "d.jsonl", "[1, 2]\n");
    let err = read_json_lines(&path, &Columns::default()).unwrap_err();
    assert!(err.to_string().ends_with("line 1: a JSON array, not an object"), "{err}");
}

#[test]
fn records_files_open_as_split_folders() {
    use torchlight_text::{records_files, TextFolder, TextSplitFolders};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "train.tsv", "label\ttext\nb\tone\na\ttwo\nb\tthree\na\tfour\n");
    write(root, "val.tsv", "label\ttext\na\tfive\nb\t \n");
    write(root, "test.csv", "label,text\na,ignored: another ending\n");
    let (train, val, test) = records_files(root).unwrap();
    assert_eq!((train, val, test), (root.join("train.tsv"), Some(root.join("val.tsv")), None));
    assert_eq!(records_files(&root.join("train.tsv")).unwrap().1, None);
    assert!(records_files(&root.join("missing.csv")).is_none());
    let folders = TextSplitFolders::open_data(root, &Columns::default()).unwrap();
    assert_eq!(folders.classes(), ["a", "b"]);
    assert_eq!(folders.train.targets(), [1, 0, 1, 0]);
    assert_eq!(folders.train.read(2).unwrap(), "three");
    let val: &TextFolder = folders.val.as_ref().unwrap();
    assert_eq!((val.targets(), val.line(1)), (vec![0, 1], Some(3)));
    // The empty record is reported and fails its sample, by file and line.
    let report = folders.check();
    assert_eq!((report.documents, report.empty.len()), (6, 1));
    assert_eq!(report.empty[0].to_string(), format!("{} line 3", root.join("val.tsv").display()));
    let mut rng = torchlight_data::rng_from_seed(0);
    let err = val.get(1, &mut rng).unwrap_err().to_string();
    assert!(err.contains("val.tsv") && err.contains("line 3"), "{err}");
    assert!(folders.test.is_none(), "test.csv has another ending than train.tsv");
    let splits = folders.split(0.5, 0).unwrap();
    assert_eq!((splits.train.len(), splits.val.len(), splits.train_texts().count()), (4, 2, 4));
}
