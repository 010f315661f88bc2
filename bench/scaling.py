#!/usr/bin/python3
"""The scaling benchmark: training steps/s of the engine against PyTorch on
three model families at three sizes each (the fixture size, about 4x and
about 16x its FLOPs per step), 1 and 2 threads, interleaved so that other
load on the machine hits both sides alike; then GEMM (dl_sgemm against
torch.matmul) and one convolution layer (the engine's im2col + GEMM against
PyTorch's, oneDNN in PyTorch 2.x) at the CNN's x16 size.

  bench/scaling.py --engine build/bench/bench/bench_scaling --python PY [--python PY2]
                   [--families mlp,cnn,gpt] [--sizes 1,4,16] [--threads 1,2]
                   [--seconds S] [--rounds R] [--no-kernels]

It needs no torch itself: it starts `bench_scaling --serve` and, per
--python, `PY bench/scaling_torch.py --serve` (each PyTorch with its own
environment: bench/run.sh sets LD_LIBRARY_PATH for a PyPI venv), and sends
them the same commands in turn. Per (model, threads): calibrated once so a
run takes about S seconds (default 1.0), then R rounds (default 3); each
round runs engine and PyTorch alternately at every thread count, the order
reversed every other round. Steps/s is the median over the rounds. A
PyTorch run stops after 3x the calibrated time (its 2-thread steps can
collapse on a busy machine); the engine always runs its calibrated steps.
Ratio: the engine's best thread setting over PyTorch's best. Bitwise: every
engine run of a model trains the same steps from the same initial
parameters, so the digests of its final parameters must all be equal, at 1
and 2 threads and in every round; exit status 1 if they are not, 3 if a
program fails. Targets (reported, not gated): every size >= 1.0x PyTorch 2.x
at its best thread setting, the fixture sizes >= 2x; GEMM >= 0.95x MKL at 2
threads; conv >= 0.9x oneDNN at x16.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# (family, size label, params): size 1 is the fixture (bench_train's models,
# the GPT of scenarios/README.md); 4 and 16 grow FLOPs per step about 4x each.
SIZES = [
    ("mlp", 1, "128"), ("mlp", 4, "288"), ("mlp", 16, "608"),
    ("cnn", 1, "16,32"), ("cnn", 4, "32,64"), ("cnn", 16, "64,128"),
    # E, blocks, heads, context T, vocab V, batch B (sequences)
    ("gpt", 1, "64,2,4,32,256,32"), ("gpt", 4, "128,2,4,32,256,32"),
    ("gpt", 16, "256,2,4,32,256,32"),
]
IMG_BATCH = 64


def macs_per_sample(family, p):
    """Multiply-adds of one forward pass of one sample (a sequence for gpt),
    counting every GEMM/conv product (attention's full T x T scores)."""
    if family == "mlp":
        h = p[0]
        return 64 * h + h * h + h * 10
    if family == "cnn":
        c1, c2 = p
        return 28 * 28 * 9 * c1 + 14 * 14 * 9 * c1 * c2 + 49 * c2 * 10
    e, blocks, _heads, t, v, _b = p
    return t * (blocks * 12 * e * e + e * v) + blocks * 2 * t * t * e


def flops_per_step(family, p):
    """Training FLOPs per step: forward 2 MACs, backward 4 (dx and dW)."""
    batch = p[5] if family == "gpt" else IMG_BATCH
    return 6 * macs_per_sample(family, p) * batch


class Server:
    """One `--serve` process; ask() sends a command and returns its words."""

    started = []  # killed at exit if still running (an error, ^C)

    def __init__(self, name, argv):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        Server.started.append(self)

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        words = line.split()
        if not words or words[0] == "error":
            raise RuntimeError(f"{self.name}: `{command}` failed ({line.strip() or 'no answer'})")
        return words

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=60)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True, help="bench_scaling executable")
    p.add_argument("--python", action="append", required=True,
                   help="interpreter with torch (repeat for several)")
    p.add_argument("--families", default="mlp,cnn,gpt")
    p.add_argument("--sizes", default="1,4,16")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-kernels", action="store_true", help="skip the GEMM and conv part")
    a = p.parse_args(argv)
    a.families = a.families.split(",")
    a.sizes = [int(s) for s in a.sizes.split(",")]
    a.threads = [int(t) for t in a.threads.split(",")]
    return a


def calibrate(server, family, params, seconds):
    """Steps for about `seconds` at the first thread count (1 thread), from
    a short run after 2 warm-up steps."""
    steps = 2
    while True:
        w = server.ask(f"train {family} {params} 1 2 {steps}")
        secs = float(w[5])
        if secs >= 0.15 or steps >= 4096:
            return max(3, round(seconds * steps / secs))
        steps *= 4


def main(argv):
    a = parse_args(argv)
    engine = Server("engine", [a.engine, "--serve"])
    torches = []
    for i, py in enumerate(a.python):
        s = Server(f"torch{i}", [py, os.path.join(HERE, "scaling_torch.py"), "--serve"])
        s.info = " ".join(s.ask("info")[1:])
        s.label = py
        torches.append(s)
    sides = [engine] + torches
    load0 = open("/proc/loadavg").read().split()[:3]
    print(f"# scaling: engine {a.engine}; rounds {a.rounds}, ~{a.seconds:g} s a run,"
          f" threads {','.join(map(str, a.threads))}; load average {' '.join(load0)}"
          f" on {os.cpu_count()} CPUs at the start")
    for t in torches:
        print(f"# {t.name}: {t.label}: {t.info}")
    status = 0
    rows = []
    t_start = time.time()
    for family, size, params in SIZES:
        if family not in a.families or size not in a.sizes:
            continue
        p = [int(v) for v in params.split(",")]
        steps = {s.name: calibrate(s, family, params, a.seconds) for s in sides}
        warm = {n: min(20, max(2, st // 10)) for n, st in steps.items()}
        rate = {(s.name, t): [] for s in sides for t in a.threads}
        digests = set()
        for r in range(a.rounds):
            order = [(t, s) for t in a.threads for s in sides]
            if r % 2:
                order.reverse()
            for t, s in order:
                # PyTorch's runs stop after 3x the calibrated time: with a
                # busy machine its 2-thread OpenMP steps can take 10-100x
                # its 1-thread ones (threads wait at barriers for a core).
                cap = "" if s is engine else f" {3 * a.seconds:g}"
                w = s.ask(f"train {family} {params} {t} {warm[s.name]} {steps[s.name]}{cap}")
                rate[(s.name, t)].append(int(w[4]) / float(w[5]))
                if s is engine:
                    digests.add(w[8])
        med = {k: statistics.median(v) for k, v in rate.items()}
        spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in rate.items()}
        bitwise = len(digests) == 1
        if not bitwise:
            status = 1
            print(f"# {family} x{size}: engine digests differ: {sorted(digests)}", file=sys.stderr)
        rows.append((family, size, params, flops_per_step(family, p), med, spread, bitwise,
                     steps))
        print(f"# done {family} x{size} ({time.time() - t_start:.0f} s)", file=sys.stderr)

    print()
    print("== training steps/s (median of rounds), engine against PyTorch")
    ts = a.threads
    head = f"{'family':6} {'size':>4} {'params':>18} {'MFLOP/step':>10}"
    head += "".join(f" {'eng t' + str(t):>9}" for t in ts)
    for i, _ in enumerate(torches):
        head += "".join(f" {f'pt{i} t{t}':>9}" for t in ts)
        head += f" {f'ratio{i}':>7} {'target':>6}"
    head += f" {'bitwise':>7} {'spread':>6}"
    print(head)
    for family, size, params, flops, med, spread, bitwise, steps in rows:
        line = f"{family:6} {'x' + str(size):>4} {params:>18} {flops / 1e6:10.1f}"
        line += "".join(f" {med[('engine', t)]:9.1f}" for t in ts)
        eng_best = max(med[("engine", t)] for t in ts)
        target = 2.0 if size == 1 else 1.0
        for tch in torches:
            line += "".join(f" {med[(tch.name, t)]:9.1f}" for t in ts)
            ratio = eng_best / max(med[(tch.name, t)] for t in ts)
            line += f" {ratio:6.2f}x {('met' if ratio >= target else 'BELOW'):>6}"
        # the spread of the cells the ratios use: each side's best setting
        best_cells = [max(((n, t) for t in ts), key=lambda k: med[k])
                      for n in ["engine"] + [tch.name for tch in torches]]
        line += f" {'yes' if bitwise else 'NO':>7}"
        line += f" {100 * max(spread[k] for k in best_cells):5.0f}%"
        print(line)
    print("# ratioN: the engine's best thread setting over torchN's best (steps/s);"
          " target 2x at x1, 1x at x4 and x16")
    print("# spread: largest (max - min) / median over the rounds of the cells the ratios use"
          " (each side's best thread setting)")

    if not a.no_kernels:
        kernels(a, engine, torches)
    load1 = open("/proc/loadavg").read().split()[:3]
    print(f"# load average {' '.join(load1)} at the end ({time.time() - t_start:.0f} s)")
    for s in sides:
        s.close()
    return status


def kernel_table(title, label, shapes, name, best, threads, torches, ratio, fmt):
    """One table of engine and PyTorch timings of kernels."""
    print()
    print(f"== {title}")
    width = max(6, max(len(name(s)) for s in shapes))
    head = f"{label:>{width}} {'threads':>7} {'engine':>9}"
    for i, _ in enumerate(torches):
        head += f" {f'torch{i}':>9} {'ratio' + str(i):>7}"
    print(head)
    for s in shapes:
        for t in threads:
            e = best[("engine", s, t)]
            line = f"{name(s):>{width}} {t:7d} {e:{fmt}}"
            for tch in torches:
                p = best[(tch.name, s, t)]
                line += f" {p:{fmt}} {ratio(e, p):6.2f}x"
            print(line)


def kernels(a, engine, torches):
    """GEMM 256^3, 1024^3 and the x16 CNN's two convolutions, best of
    repeated calls, interleaved over the rounds; the best round counts."""
    gemms = [(256, 256, 256), (1024, 1024, 1024)]
    # conv1 and conv2 of cnn x16 (64,128), batch 64
    convs = [(64, 1, 64, 28, 28), (64, 64, 128, 14, 14)]
    secs = max(0.2, a.seconds / 2)
    sides = [engine] + torches
    gbest, cbest = {}, {}
    for r in range(a.rounds):
        for t in a.threads:
            order = sides if r % 2 == 0 else sides[::-1]
            for s in order:
                for g in gemms:
                    w = s.ask(f"gemm {g[0]} {g[1]} {g[2]} {t} {secs}")
                    k = (s.name, g, t)
                    gbest[k] = max(gbest.get(k, 0.0), float(w[5]))
                for c in convs:
                    w = s.ask(f"conv {' '.join(map(str, c))} {t} {secs}")
                    k = (s.name, c, t)
                    cbest[k] = min(cbest.get(k, 1e30), float(w[7]))
    kernel_table("GEMM C = A B (row-major, float32), GFLOP/s, best call over the rounds",
                 "M=N=K", gemms, lambda g: str(g[0]), gbest, a.threads, torches,
                 lambda e, p: e / p, "9.1f")
    print("# ratio: engine GFLOP/s over torch.matmul's; target >= 0.95x MKL at 2 threads")
    kernel_table("conv2d 3x3 pad 1 forward + backward (dx, dW, db), ms, best call over"
                 " the rounds", "N,C,O,H,W", convs, lambda c: ",".join(map(str, c)), cbest,
                 a.threads, torches, lambda e, p: p / e, "9.2f")
    print("# ratio: torch ms over engine ms (speed relative to PyTorch's convolution);"
          " target >= 0.9x oneDNN")


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except RuntimeError as e:
        print(f"scaling.py: {e}", file=sys.stderr)
        sys.exit(3)
    finally:
        for server in Server.started:
            if server.proc.poll() is None:
                server.proc.kill()
