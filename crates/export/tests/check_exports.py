"""Checks the files torchlight-export's tests wrote, with real runtimes.

Usage: python check_exports.py DIR

For every DIR/<model>__<variant>.onnx: onnx.checker (full check), opset and the symbolic batch
axis, then onnxruntime (CPU) on the inputs in DIR/<model>-io.safetensors at batch 1 and batch 7.
For every DIR/<model>__<variant>.pt: torch.jit.load and the same two batches.
Prints one line per comparison, `<runtime> <file> <batch> <max |diff|> <max |expected|>`, and
`meta <file> <key> <value>` per metadata entry; the Rust test applies the tolerances.
"""

import sys
from pathlib import Path

import onnx
import onnxruntime as ort
import torch
from safetensors.torch import load_file

torch.set_num_threads(1)
out_dir = Path(sys.argv[1])
for path in sorted(out_dir.iterdir()):
    if "__" not in path.name or path.suffix not in (".onnx", ".pt"):
        continue
    io = load_file(out_dir / f"{path.name.split('__')[0]}-io.safetensors")
    cases = [("b1", io["x1"], io["y1"]), ("b7", io["x7"], io["y7"])]
    if path.suffix == ".onnx":
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
        assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17], model.opset_import
        assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
        assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
        for prop in model.metadata_props:
            print("meta", path.name, prop.key, prop.value)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        for batch, x, y in cases:
            got = torch.from_numpy(session.run(None, {name: x.numpy()})[0])
            print("onnxruntime", path.name, batch, (got - y).abs().max().item(), y.abs().max().item())
    else:
        module = torch.jit.load(str(path))
        module.eval()
        with torch.no_grad():
            for batch, x, y in cases:
                got = module(x)
                print("torch.jit", path.name, batch, (got - y).abs().max().item(), y.abs().max().item())
