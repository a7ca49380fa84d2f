"""scripts/cuda_emu_rewrite.py: the .cu -> C++ rewrite the CUDA emulator builds on."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cuda_emu_rewrite.py"
_spec = importlib.util.spec_from_file_location("cuda_emu_rewrite", SCRIPT)
rw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rw)


def test_launches_of_names_template_ids_and_tables_become_launch_calls():
    src = (
        "void F(cudaStream_t s) {\n"
        "  Plain<<<n, 256, 0, s>>>(x, y);\n"
        "  if (n == 1) MatVec<T, 1><<<grid, block, 0, s>>>(w, a,\n"
        "      n, o);\n"
        "  kByGroup[p.n_head / p.n_head_kv - 1]<<<dim3(a, b), 128>>>(p);\n"
        "  ns::K<Ops<2>><<<1, 32>>>();\n"
        "}\n")
    out = rw.rewrite(src, "k.cu")
    assert out.startswith('#line 1 "k.cu"\n')
    body = out.split("\n", 1)[1]
    assert '::kinfer_cudaemu::Launch("Plain", Plain, n, 256, 0, s)(x, y);' in body
    assert ('if (n == 1) ::kinfer_cudaemu::Launch("MatVec<T, 1>", MatVec<T, 1>, grid, block, 0, s)'
            "(w, a,\n      n, o);") in body
    assert ('::kinfer_cudaemu::Launch("kByGroup[p.n_head / p.n_head_kv - 1]", '
            "kByGroup[p.n_head / p.n_head_kv - 1], dim3(a, b), 128)(p);") in body
    assert '::kinfer_cudaemu::Launch("ns::K<Ops<2>>", ns::K<Ops<2>>, 1, 32)();' in body
    assert "<<<" not in body and ">>>" not in body
    # Lines stay where they were, so compiler messages point into the .cu.
    assert body.count("\n") == src.count("\n")


def test_extern_shared_arrays_become_the_blocks_dynamic_shared_memory():
    src = ("  extern __shared__ float smem[];\n"
           "  extern __shared__ __align__(128) unsigned char raw[];\n")
    out = rw.rewrite(src, "k.cu")
    assert "float* smem = reinterpret_cast<float*>(::kinfer_cudaemu::DynamicShared());" in out
    assert ("unsigned char* raw = reinterpret_cast<unsigned char*>(::kinfer_cudaemu::DynamicShared());"
            in out)


@pytest.mark.parametrize("src, why", [
    ("K<<<1, 32>>>;\n", "no argument list"),
    ("K<<<1, 32(x);\n", "without '>>>'"),
    ("  <<<1, 32>>>(x);\n", "cannot find the kernel"),
])
def test_a_launch_it_cannot_parse_is_an_error_naming_the_line(tmp_path, src, why):
    cu = tmp_path / "bad.cu"
    cu.write_text(src)
    r = subprocess.run([sys.executable, str(SCRIPT), str(cu), str(tmp_path / "bad.cc")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert why in r.stderr
    assert not (tmp_path / "bad.cc").exists()


def test_the_backends_kernels_rewrite_without_a_launch_left(tmp_path):
    for name in ("quant_kernels", "ops_kernels", "sample_kernels", "attention_kernels"):
        src = (ROOT / "runtime" / "backend" / "cuda" / f"{name}.cu").read_text()
        out = rw.rewrite(src, f"{name}.cu")
        assert "<<<" not in out and "extern __shared__" not in out
        assert out.count("::kinfer_cudaemu::Launch(") == src.count("<<<")
