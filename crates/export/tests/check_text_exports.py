"""Checks the text classifiers' exports torchlight-export's tests wrote, with real runtimes.

Usage: python check_text_exports.py DIR

For every DIR/<model>__<variant>.onnx: onnx.checker (full check), opset 17, the inputs `ids`
(int64 [batch, length]) and `lengths` (int64 [batch]) and the output `logits` (float [batch,
classes]) with symbolic axes, then onnxruntime (CPU) on the cases in DIR/<model>-io.safetensors
(`ids_<case>`, `lengths_<case>`, `logits_<case>`: the Rust model's forward_inputs), and the
padding invariance: `alone_ids` (one document) against row 0 of `pair_ids` (the same document
padded beside a longer one). For every DIR/<model>__<variant>.pt: torch.jit.load and the same
cases as `module(ids, lengths)`.

Prints `<runtime> <file> <case> <max |diff|> <max |expected|>` per comparison,
`invariance <file> <max |diff|>` and `meta <file> <key> <value>`; the Rust test applies the
tolerances.
"""

import sys
from pathlib import Path

import onnx
import onnxruntime as ort
import torch
from safetensors.torch import load_file

torch.set_num_threads(1)
out_dir = Path(sys.argv[1])


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


for path in sorted(out_dir.iterdir()):
    if "__" not in path.name or path.suffix not in (".onnx", ".pt"):
        continue
    io = load_file(out_dir / f"{path.name.split('__')[0]}-io.safetensors")
    cases = sorted(k[len("logits_"):] for k in io if k.startswith("logits_"))
    if path.suffix == ".onnx":
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
        assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17], model.opset_import
        inputs = {i.name: (i.type.tensor_type.elem_type, dims(i)) for i in model.graph.input}
        assert inputs == {
            "ids": (onnx.TensorProto.INT64, ["batch", "length"]),
            "lengths": (onnx.TensorProto.INT64, ["batch"]),
        }, inputs
        (output,) = model.graph.output
        assert output.name == "logits" and output.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        assert dims(output)[0] == "batch", dims(output)
        for prop in model.metadata_props:
            print("meta", path.name, prop.key, prop.value)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

        def run(ids, lengths):
            return torch.from_numpy(session.run(["logits"], {"ids": ids.numpy(), "lengths": lengths.numpy()})[0])

        for case in cases:
            got = run(io[f"ids_{case}"], io[f"lengths_{case}"])
            want = io[f"logits_{case}"]
            assert got.shape == want.shape, (got.shape, want.shape)
            print("onnxruntime", path.name, case, (got - want).abs().max().item(), want.abs().max().item())
        alone = run(io["alone_ids"], io["alone_lengths"])
        pair = run(io["pair_ids"], io["pair_lengths"])
        print("invariance", path.name, (alone[0] - pair[0]).abs().max().item())
    else:
        module = torch.jit.load(str(path))
        module.eval()
        with torch.no_grad():
            for case in cases:
                got = module(io[f"ids_{case}"], io[f"lengths_{case}"])
                want = io[f"logits_{case}"]
                assert got.shape == want.shape, (got.shape, want.shape)
                print("torch.jit", path.name, case, (got - want).abs().max().item(), want.abs().max().item())
