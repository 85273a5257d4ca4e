"""GPU truth: run fastmon on real CUDA work and check what only a GPU shows.

    python benchmarks/gpu_check.py                 # all checks, ~5 min on one GPU
    python benchmarks/gpu_check.py --out DIR       # also write DIR/gpu_check-<date>.md/.json

On a machine without CUDA every check is reported as skipped, with the reason, and the
script exits 0 (CI runs it that way). A failed check exits 1.

Checks:
  events_vs_profiler  device forward+backward from fastmon's CUDA events vs the CUDA
                      kernel time torch.profiler records for the same loop (within 10%)
  no_added_sync       the same loop timed with CUDA events, bare vs probed: ratio <= 1.01
  h2d_pinned          pageable vs pinned copies told apart; pin_memory advice only for pageable
  item_sync           a per-step loss.item() found as a sync stall, with its line
  nvml                NVML utilization and memory read during a run
  starved_fixed       the starved example fixed live (workers + pin_memory), >= 2.5x
  amp_bf16            bf16 autocast hot-applied (on accept) on a matmul-heavy model: faster, kept
  oom_revert          a batch increase that would run out of memory is refused (tried
                      between steps) and training goes on unchanged
  profile_capture     `--profile-at`: a torch.profiler capture of CUDA steps holds the
                      kernels (top operators by self CUDA time) and the trace file
  compile_speed       a nanoGPT-sized transformer under torch.compile, bare vs fastmon:
                      steady step time ratio <= 1.02, no graph break or recompilation
  mfu                 the same transformer eager: fastmon's counted TFLOP/s within 15% of
                      nanoGPT's formula over the script's own CUDA-event time, an MFU
                      against the chip's datasheet, a verdict, and no synchronization
                      (torch.cuda.set_sync_debug_mode("warn") in the loop) from the probe
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

MATMUL_LOOP = textwrap.dedent("""
    import sys, time, torch
    from torch import nn
    torch.manual_seed(0)
    steps, width, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mode = sys.argv[4] if len(sys.argv) > 4 else ""
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.GELU())]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for step in range(steps + 10):
        if step == 10:
            torch.cuda.synchronize(); start.record()
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        if mode == "item":
            print(f"loss {loss.item():.4f}")
    end.record(); end.synchronize()
    print(f"device_ms_per_step {start.elapsed_time(end) / steps:.4f}")
""")

COMPILE_LOOP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    torch.manual_seed(0)
    steps, eager = int(sys.argv[1]), sys.argv[2:] == ["eager"]
    layer = lambda: nn.TransformerEncoderLayer(384, 6, 1536, dropout=0.0, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.Embedding(65, 384), *[layer() for _ in range(6)], nn.Linear(384, 65)).cuda()
    if not eager:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randint(0, 65, (64, 256), device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for step in range(steps + 50):
        if step == 50:
            torch.cuda.synchronize(); start.record()
            torch.cuda.set_sync_debug_mode("warn" if eager else 0)  # the loop has none: any is the probe's
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x).view(-1, 65), x.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.set_sync_debug_mode(0)
    end.record(); end.synchronize()
    from torch._dynamo.utils import counters
    ms = start.elapsed_time(end) / steps
    # nanoGPT's estimate_mfu: 6N + 12 L H Q T FLOPs a token, forward and backward
    flops = (6 * sum(p.numel() for p in model.parameters()) + 12 * 6 * 6 * 64 * 256) * x.numel()
    print(f"device_ms_per_step {ms:.4f}")
    print(f"tflops_per_s {flops / (ms / 1e3) / 1e12:.3f}")
    print(f"graph_breaks {sum(counters['graph_break'].values())}")
    print(f"unique_graphs {counters['stats']['unique_graphs']}")
""")

PROFILE_LOOP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    steps, width, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(width, width), nn.GELU())]).cuda()
    x = torch.randn(batch, width, device="cuda")
    for _ in range(10):
        model(x).square().mean().backward()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            model(x).square().mean().backward()
        torch.cuda.synchronize()
    kernel_us = sum(event.self_device_time_total for event in prof.key_averages())
    print(f"profiler_fwd_bwd_ms {kernel_us / 20 / 1000:.4f}")
""")

COPY_LOOP = textwrap.dedent("""
    import sys, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    pin = sys.argv[1] == "pinned"
    data = TensorDataset(torch.randn(8192, 3, 64, 64), torch.randint(0, 10, (8192,)))
    loader = DataLoader(data, batch_size=256, pin_memory=pin)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        for x, y in loader:
            x, y = x.cuda(non_blocking=pin), y.cuda(non_blocking=pin)
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
""")

OOM_LOOP = textwrap.dedent("""
    # Memory filled so that the batch fits and 8x the batch does not; then a batch-size
    # change is asked through the probe's control side: it must be refused (tried between
    # steps), and the training must finish untouched.
    import torch, fastmon.probe
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    probe = fastmon.probe.install(None)
    acks = []
    probe.message = acks.append
    model = nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64 * 40, 4096)), batch_size=64)
    x = next(iter(loader))[0].cuda()
    opt.zero_grad(); model(x).sum().backward(); opt.step()
    need = torch.cuda.max_memory_allocated()
    free, _ = torch.cuda.mem_get_info()
    filler = torch.empty(int(free - 2 * need), dtype=torch.uint8, device="cuda")
    steps = 0
    for epoch in range(2):
        for (xb,) in loader:
            opt.zero_grad(); model(xb.cuda()).sum().backward(); opt.step()
            steps += 1
            if steps == 5:
                probe.publisher.control.append({"t": "apply", "exp": 1, "action": "batch_size",
                                                "params": {"factor": 8, "lr_scale": 8.0}})
    refused = [a for a in acks if a.get("t") == "applied" and not a["ok"]]
    print("refused", bool(refused), refused[0]["error"] if refused else "")
    print("steps", steps, "lr", opt.param_groups[0]["lr"], "batch", loader.batch_size)
""")



def run(cmd, cwd, timeout=300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def fastmon(args, cwd, timeout=300) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "fastmon", *args], cwd, timeout)


def report(cwd) -> dict:
    out = fastmon(["report", "--json"], cwd)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout)


def script(cwd: Path, name: str, text: str) -> Path:
    path = cwd / name
    path.write_text(text)
    return path


def value(stdout: str, key: str) -> float:
    return float(next(line.split()[1] for line in stdout.splitlines() if line.startswith(key)))


# --- the checks: each returns a detail string, or raises AssertionError to fail ---
def check_events_vs_profiler(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", loop, 200, 4096, 512], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    device = report(cwd)["device"]
    assert device, "no CUDA-event device timings were recorded"
    events_ms = device["device_forward_ms_median"] + device["device_backward_ms_median"]
    prof = script(cwd, "prof.py", PROFILE_LOOP)
    out = run([sys.executable, prof, 200, 4096, 512], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    profiler_ms = value(out.stdout, "profiler_fwd_bwd_ms")
    ratio = events_ms / profiler_ms
    assert 0.9 <= ratio <= 1.1, f"events {events_ms:.3f} ms vs profiler kernels {profiler_ms:.3f} ms"
    return f"device forward+backward {events_ms:.3f} ms (events) vs {profiler_ms:.3f} ms (profiler kernels): {ratio:.3f}"


def check_no_added_sync(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    bare, probed = [], []
    for _ in range(3):
        out = run([sys.executable, loop, 300, 2048, 256], cwd)
        assert out.returncode == 0, out.stderr[-2000:]
        bare.append(value(out.stdout, "device_ms_per_step"))
        out = fastmon(["run", "--headless", loop, 300, 2048, 256], cwd)
        assert out.returncode == 0, out.stderr[-2000:]
        probed.append(value(out.stdout, "device_ms_per_step"))
    ratio = statistics.median(p / b for p, b in zip(probed, bare))
    assert ratio <= 1.01, f"probed/bare step time {ratio:.4f}"
    return f"device time per step probed/bare = {ratio:.4f} (median of 3 interleaved pairs)"


def check_h2d_pinned(cwd: Path) -> str:
    loop = script(cwd, "copies.py", COPY_LOOP)
    results = {}
    for mode in ("pageable", "pinned"):
        out = fastmon(["run", "--headless", loop, mode], cwd)
        assert out.returncode == 0, out.stderr[-2000:]
        results[mode] = report(cwd)
    pageable, pinned = results["pageable"], results["pinned"]
    assert pageable["phases"]["h2d"] > 0, "no h2d time measured"
    ids = lambda r: {a["id"] for a in r["advice"]}  # noqa: E731
    assert "dataloader.pin_memory" in ids(pageable), "pin_memory advice missing on pageable copies"
    assert "dataloader.pin_memory" not in ids(pinned), "pin_memory advice on pinned copies"
    return (f"h2d share pageable {pageable['phases']['h2d']:.1%} vs pinned {pinned['phases']['h2d']:.1%}; "
            "pin_memory advised for pageable only")


def check_item_sync(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", loop, 200, 1024, 64, "item"], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    advice = {a["id"]: a for a in report(cwd)["advice"]}
    assert "sync.per_step" in advice, f"no sync.per_step advice: {sorted(advice)}"
    location = advice["sync.per_step"]["location"] or ""
    assert location.endswith("matmul.py:20"), f"location {location!r}"
    return f"sync.per_step at {location}: {advice['sync.per_step']['evidence']}"


def check_nvml(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", loop, 3000, 4096, 512], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    gpu = report(cwd)["gpu"]
    assert gpu.get("available"), gpu.get("note")
    device = gpu["devices"][0]
    assert device["util_mean"] and device["util_mean"] > 10, device
    assert device["mem_used_peak"], device
    return f"{device['name']}: util {device['util_mean']}% mean, memory peak {device['mem_used_peak'] / 2**30:.1f} GiB"


def check_starved_fixed(cwd: Path) -> str:
    out = fastmon(["run", "--headless", "--apply", "auto", EXAMPLES / "starved.py", "--epochs", "2"], cwd, 600)
    assert out.returncode == 0, out.stderr[-2000:]
    applied = {a["id"]: a for a in report(cwd)["applied"]}
    workers = applied.get("dataloader.num_workers")
    assert workers and workers["kept"], applied
    speedup = workers["after_samples_per_s"] / workers["before_samples_per_s"]
    assert speedup >= 2.5, f"{speedup:.2f}x"
    return f"num_workers {workers['params']}: {speedup:.1f}x samples/s; applied: {sorted(applied)}"


def check_amp_bf16(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", "--apply", "auto", "--allow", "amp", loop, 3000, 8192, 1024], cwd, 600)
    assert out.returncode == 0, out.stderr[-2000:]
    applied = {a["id"]: a for a in report(cwd)["applied"]}
    amp = applied.get("amp")
    assert amp, f"amp was not applied: {sorted(applied)}"
    assert amp["kept"] and amp["speedup"] and amp["speedup"] > 1.05, amp
    return f"bf16 autocast: {amp['speedup']:.2f}x samples/s, kept"


def check_oom_revert(cwd: Path) -> str:
    loop = script(cwd, "oom.py", OOM_LOOP)
    out = run([sys.executable, loop], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused True" in out.stdout and "out of memory" in out.stdout, out.stdout
    assert "steps 80 lr 0.01 batch 64" in out.stdout, out.stdout
    return "8x batch refused after a trial between steps (out of memory); training finished unchanged"


def check_profile_capture(cwd: Path) -> str:
    loop = script(cwd, "matmul.py", MATMUL_LOOP)
    out = fastmon(["run", "--headless", "--profile-at", 50, "--profile-steps", 3, loop, 200, 2048, 256], cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    [capture] = report(cwd)["profiles"]
    assert not capture.get("error"), capture["error"]
    assert Path(capture["file"]).is_file(), capture["file"]
    kernels = capture.get("top_device") or []
    assert kernels and kernels[0]["self_us"] > 0, f"no CUDA kernels in the capture: {capture.get('top_cpu')}"
    return (f"steps {capture['first']}-{capture['last']}: top kernel {kernels[0]['name'][:60]} "
            f"{kernels[0]['share']:.0%} of CUDA time; {len(capture.get('patterns') or [])} anti-pattern finding(s)")


def check_compile_speed(cwd: Path) -> str:
    loop = script(cwd, "compiled.py", COMPILE_LOOP)
    bare, probed, graphs = [], [], {}
    for pair in range(2):
        for mode in (("bare", "fastmon") if pair == 0 else ("fastmon", "bare")):
            out = run([sys.executable, loop, 300], cwd, 600) if mode == "bare" else \
                fastmon(["run", "--headless", loop, 300], cwd, 600)
            assert out.returncode == 0, out.stderr[-2000:]
            (bare if mode == "bare" else probed).append(value(out.stdout, "device_ms_per_step"))
            graphs[mode] = (value(out.stdout, "graph_breaks"), value(out.stdout, "unique_graphs"))
    assert graphs["fastmon"] == graphs["bare"], f"graph breaks, graphs: bare {graphs['bare']}, fastmon {graphs['fastmon']}"
    ratio = statistics.median(p / b for p, b in zip(probed, bare))
    assert ratio <= 1.02, f"fastmon/bare compiled step time {ratio:.4f}"
    return f"compiled step fastmon/bare = {ratio:.4f} (2 interleaved pairs); graph breaks, graphs {graphs['bare']}"


def check_mfu(cwd: Path) -> str:
    loop = script(cwd, "gpt.py", COMPILE_LOOP)
    out = fastmon(["run", "--headless", loop, 200, "eager"], cwd, 600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "synchronizing CUDA operation" not in out.stderr, "a synchronization in the loop: " + next(
        line for line in out.stderr.splitlines() if "synchronizing CUDA operation" in line)
    own = value(out.stdout, "tflops_per_s")
    compute = report(cwd)["compute"]
    assert compute["flops_per_step"], compute.get("flops_why")
    ratio = compute["tflops_per_s"] / own
    assert 0.85 <= ratio <= 1.15, f"fastmon {compute['tflops_per_s']:.2f} TFLOP/s vs the formula's {own:.2f}"
    assert compute["mfu"] is not None, compute.get("mfu_why")
    return (f"{compute['flops_per_step'] / 1e9:.1f} GFLOP a step ({compute['dtype']}), {compute['tflops_per_s']:.1f} "
            f"TFLOP/s vs nanoGPT's formula {own:.1f} ({ratio:.3f}); MFU {compute['mfu']:.1%} of {compute['peak_of']}; "
            f"{compute['bound']} (GPU busy {compute['gpu_busy_in_steps']}% in the steps); no sync")


CHECKS = {
    "events_vs_profiler": check_events_vs_profiler,
    "no_added_sync": check_no_added_sync,
    "h2d_pinned": check_h2d_pinned,
    "item_sync": check_item_sync,
    "nvml": check_nvml,
    "starved_fixed": check_starved_fixed,
    "amp_bf16": check_amp_bf16,
    "oom_revert": check_oom_revert,
    "profile_capture": check_profile_capture,
    "compile_speed": check_compile_speed,
    "mfu": check_mfu,
}


def gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write gpu_check-<date>.md and .json here")
    parser.add_argument("--only", nargs="*", choices=sorted(CHECKS))
    args = parser.parse_args()
    name = gpu_name()
    results = []
    for check, fn in CHECKS.items():
        if args.only and check not in args.only:
            continue
        started = time.monotonic()
        if name is None:
            status, detail = "skipped", "no CUDA device here (torch.cuda.is_available() is False)"
        else:
            with tempfile.TemporaryDirectory(prefix=f"gpu-check-{check}-") as cwd:
                try:
                    status, detail = "passed", fn(Path(cwd))
                except AssertionError as exc:
                    status, detail = "failed", str(exc)
                except Exception as exc:  # a broken check is a failure, with its reason
                    status, detail = "failed", f"{type(exc).__name__}: {exc}"
        results.append({"check": check, "status": status, "detail": detail,
                        "seconds": round(time.monotonic() - started, 1)})
        print(f"{status:>7}  {check:<20} {detail}", flush=True)
    counts = {s: sum(r["status"] == s for r in results) for s in ("passed", "failed", "skipped")}
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped on {name or 'no GPU'}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.date.today().isoformat()
        (out / f"gpu_check-{stamp}.json").write_text(json.dumps({"date": stamp, "gpu": name, "results": results},
                                                                indent=1))
        lines = [f"# GPU check — {stamp} — {name or 'no GPU'}", "", "| check | status | detail |", "| --- | --- | --- |"]
        lines += [f"| {r['check']} | {r['status']} | {r['detail']} |" for r in results]
        (out / f"gpu_check-{stamp}.md").write_text("\n".join(lines) + "\n")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
