"""ONNX Runtime inference for the cross-encoder (`rerank score --model bert --runtime onnx`).

ONNX Runtime fuses attention, GELU and layer norm into single kernels, which PyTorch's eager mode runs
as many small operators; on a CPU that is the difference between the two. ONNX Runtime is already
installed with Pyserini; exporting needs the `onnx` and `onnxscript` packages (the `onnx` extra).

A checkpoint is exported once, on first use, to `.cache/onnx/bert-HASH.onnx` under the project home
(never into the checkpoint folder: that would change its content hash), written atomically. Scores
match PyTorch's to about 1e-6.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_output
from ..errors import BackendError
from ..paths import cache_dir

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 18


def _export(model: Any, tokenizer: Any, target: Path) -> None:
    import torch

    try:
        import onnxscript  # noqa: F401  (the exporter needs it; fail with our message, not deep inside torch)
    except ImportError:
        raise BackendError("--runtime onnx needs the packages onnx and onnxscript: pip install 'rerank[onnx]'") from None

    class Logit(torch.nn.Module):
        def __init__(self, inner: Any):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).logits[:, 0]

    example = tokenizer(["a query", "another query"], ["a passage", "a longer passage of text"], padding=True,
                        return_tensors="pt")
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length", max=512)
    shapes = {name: {0: batch, 1: length} for name in INPUTS}
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):  # its progress lines, not the run
        warnings.simplefilter("ignore")
        program = torch.onnx.export(Logit(model), tuple(example[name] for name in INPUTS), input_names=list(INPUTS),
                                    output_names=["score"], dynamic_shapes=shapes, opset_version=OPSET, dynamo=True,
                                    verbose=False)
    with atomic_output(target, "wb") as handle:
        handle.write(program.model_proto.SerializeToString())


class OnnxScorer:
    """Scores padded batches (numpy int64 inputs) with an ONNX Runtime session of one checkpoint."""

    def __init__(self, model: Any, tokenizer: Any, checkpoint_hash: str, threads: int | None = None):
        import onnxruntime

        path = cache_dir() / "onnx" / f"bert-{checkpoint_hash}-opset{OPSET}.onnx"
        if not path.is_file():
            print(f"rerank: exporting the checkpoint to ONNX once: {path}", file=sys.stderr)
            path.parent.mkdir(parents=True, exist_ok=True)
            _export(model, tokenizer, path)
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        self.path = path
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def __call__(self, inputs: dict) -> list[float]:
        feed = {name: np.ascontiguousarray(inputs[name].numpy(), dtype=np.int64) for name in INPUTS}
        return self.session.run(None, feed)[0].tolist()
