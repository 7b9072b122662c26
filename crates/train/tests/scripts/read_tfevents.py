"""Reads a run folder's TensorBoard event files with tensorboard's own EventAccumulator and
prints what it sees as JSON: {"file_version": ..., "scalars": {tag: [[step, value], ...]}}.

Usage: python read_tfevents.py RUN_DIR"""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1])
acc.Reload()
scalars = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
print(json.dumps({"file_version": acc.file_version, "scalars": scalars}))
