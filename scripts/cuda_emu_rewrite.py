#!/usr/bin/env python3
"""Turns a CUDA source (.cu) into C++ for the CUDA emulator (runtime/backend/cuda/emu/cuda_emu.h).

    cuda_emu_rewrite.py IN.cu OUT.cc

Two rewrites, both keeping every line where it was (a #line directive names the .cu, so compiler
messages point at the original):
  * `kernel<<<grid, block[, smem[, stream]]>>>(args)` becomes
    `::kinfer_cudaemu::Launch("kernel", kernel, grid, block, smem, stream)(args)`; the kernel
    expression may be a template-id (`K<T, 4>`) or an indexed table (`table[i]`).
  * `extern __shared__ [__align__(n)] T name[];` becomes a pointer to the block's dynamic shared
    memory.
Anything else is left as it is; a launch the script cannot parse is an error, not a guess.
"""
import re
import sys

EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:\s]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;")

OPEN = {")": "(", "]": "[", ">": "<"}


def kernel_start(src, end):
    """Index where the kernel expression that ends just before `end` begins: a name with `::`
    qualifiers, each part optionally followed by <template args> or [an index]."""
    i = end - 1
    while i >= 0 and src[i].isspace():
        i -= 1
    while i >= 0:
        c = src[i]
        if c in OPEN:  # skip back over a balanced <...>, [...] or (...)
            depth, want = 0, OPEN[c]
            while i >= 0:
                if src[i] == c:
                    depth += 1
                elif src[i] == want:
                    depth -= 1
                    if depth == 0:
                        break
                i -= 1
            i -= 1
        elif c.isalnum() or c in "_:":
            i -= 1
        else:
            break
    return i + 1


def matching(src, i, open_c, close_c):
    """Index just past the bracket that closes the one at src[i]."""
    depth = 0
    while i < len(src):
        if src[i] == open_c:
            depth += 1
        elif src[i] == close_c:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced brackets")


def rewrite(src, path):
    src = EXTERN_SHARED.sub(
        lambda m: f"{m.group(1)}* {m.group(2)} = reinterpret_cast<{m.group(1)}*>(::kinfer_cudaemu::DynamicShared());",
        src)
    out, pos = [], 0
    while True:
        lt = src.find("<<<", pos)
        if lt < 0:
            break
        gt = src.find(">>>", lt)
        if gt < 0:
            raise ValueError(f"{path}: '<<<' without '>>>'")
        start = kernel_start(src, lt)
        kernel = src[start:lt].strip()
        if not kernel:
            line = src.count("\n", 0, lt) + 1
            raise ValueError(f"{path}:{line}: cannot find the kernel before '<<<'")
        config = src[lt + 3:gt]
        j = gt + 3
        while j < len(src) and src[j].isspace():
            j += 1
        if j >= len(src) or src[j] != "(":
            line = src.count("\n", 0, lt) + 1
            raise ValueError(f"{path}:{line}: no argument list after '>>>'")
        args_end = matching(src, j, "(", ")")
        name = re.sub(r"\s+", " ", kernel).replace('"', "'")
        out.append(src[pos:start])
        out.append(f'::kinfer_cudaemu::Launch("{name}", {kernel}, {config}){src[gt + 3:args_end]}')
        pos = args_end
    out.append(src[pos:])
    return f'#line 1 "{path}"\n' + "".join(out)


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        src = f.read()
    try:
        text = rewrite(src, argv[1])
    except ValueError as e:
        print(f"cuda_emu_rewrite: {e}", file=sys.stderr)
        return 1
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
