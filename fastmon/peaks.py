"""What a chip can do at most: datasheet peaks of dense matrix math, by chip and dtype,
for the MFU (model FLOPs utilization) a run reaches. NVIDIA's datasheets, dense (the
"with sparsity" figures halved), SXM boards where the forms differ. A chip not in the
table has no MFU, and the report says so; a CPU has none (its peak depends on the cores,
the vector unit and the clock the OS gives it)."""

from __future__ import annotations

import re

# (pattern on the name NVML and torch give, its name here, TFLOP/s by dtype); first match wins
PEAKS: list[tuple[str, str, dict[str, float]]] = [
    (r"\bB200\b", "B200", {"bfloat16": 2250, "float16": 2250, "tf32": 1100, "float32": 80, "float8": 4500}),
    (r"\bH200\b", "H200", {"bfloat16": 989, "float16": 989, "tf32": 494.5, "float32": 67, "float8": 1979}),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe", {"bfloat16": 756, "float16": 756, "tf32": 378, "float32": 51,
                                         "float8": 1513}),
    (r"\bH100\b", "H100 SXM", {"bfloat16": 989, "float16": 989, "tf32": 494.5, "float32": 67, "float8": 1979}),
    (r"\bA100\b", "A100", {"bfloat16": 312, "float16": 312, "tf32": 156, "float32": 19.5}),
    (r"\bL40S\b", "L40S", {"bfloat16": 362, "float16": 362, "tf32": 183, "float32": 91.6, "float8": 733}),
    (r"\bL4\b", "L4", {"bfloat16": 121, "float16": 121, "tf32": 60, "float32": 30.3, "float8": 242.5}),
    (r"\bA10\b", "A10", {"bfloat16": 125, "float16": 125, "tf32": 62.5, "float32": 31.2}),
    (r"\bV100\b", "V100", {"float16": 125, "float32": 15.7}),
    (r"\bT4\b", "T4", {"float16": 65, "float32": 8.1}),
]
TF32_PRECISIONS = ("high", "medium")  # torch.set_float32_matmul_precision values that run fp32 matmuls as TF32


def math_dtype(dtype: str, float32_matmul_precision: str | None) -> str:
    """The dtype the matrix units run: float32 matmuls run as TF32 where torch allows it."""
    if dtype == "float32" and float32_matmul_precision in TF32_PRECISIONS:
        return "tf32"
    return "float8" if dtype.startswith("float8") else dtype


def peak_tflops(device_name: str | None, dtype: str) -> tuple[str, float] | None:
    """(the chip's name in the table, its dense peak for ``dtype`` in TFLOP/s), or None."""
    for pattern, name, peaks in PEAKS:
        if device_name and re.search(pattern, device_name) and dtype in peaks:
            return name, peaks[dtype]
    return None
